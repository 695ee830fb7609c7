"""The compiled twin of ``fmq.protocol._codecs``: each ``partNN`` here is the generated
``_codecs/partNN.py`` compiled by Cython (setup.py); ``CODECS`` is the pure table with every
function replaced by its compiled twin of the same name. Importing this package raises
ImportError when the parts were not built (no C compiler), and ``fmq.protocol._impl`` then
runs the pure codecs.
"""

import importlib

from fmq.protocol import _codecs as _pure


def _compiled_table() -> dict:
    parts = {}
    table = {}
    for name, (layout, encode, decode) in _pure.CODECS.items():
        part = encode.__module__.rpartition(".")[2]
        if part not in parts:
            parts[part] = importlib.import_module(f"{__name__}.{part}")
        module = parts[part]
        table[name] = (layout, getattr(module, encode.__name__), getattr(module, decode.__name__))
    return table


#: struct name -> (its layout, encode, decode), as in ``fmq.protocol._codecs``
CODECS = _compiled_table()
