"""Errors of transactional messages."""

from __future__ import annotations

from fmq.errors.base import FMQError


class TransactionError(FMQError):
    """Base class of transaction errors."""

    code = 40


class TooManyTransactions(TransactionError):
    """The open-transaction limit is reached; commit or roll back some first."""

    code = 41
    retriable = True


class DuplicateTransaction(TransactionError):
    """The transaction id belongs to a transaction that is fully prepared (open,
    committing or committed); pick another id. A client that retried a prepare whose
    answer it lost may take this as "my prepare is stored": a transaction is only ever
    open here once every one of its messages is durable."""

    code = 42


class UnknownTransaction(TransactionError):
    """No open or recently finished transaction has this id."""

    code = 43


class TransactionConflict(TransactionError):
    """Commit after rollback, or rollback after commit (or of a committing transaction)."""

    code = 44


class TransactionRolledBack(TransactionError):
    """The transaction id belongs to a rolled-back transaction, for example a prepare that
    a crash cut short, which recovery rolled back. Nothing of it is stored: prepare the
    messages again under a new transaction id (never commit this one)."""

    code = 45


class TransactionInProgress(TransactionError):
    """A prepare with this transaction id is being written right now (an earlier attempt
    of the same request); retry shortly to learn its outcome."""

    code = 46
    retriable = True


class TransactionScopeClosed(TransactionError):
    """A PREPARE of a transaction id ``SCOPE//NAME`` whose scope is closed: the
    transaction named ``SCOPE`` of the same producer group has been prepared (whoever owns
    the scope marked it over, docs/transactions.md, *Scopes*). Nothing is stored; the
    transaction belongs to work that has already been committed or given up."""

    code = 47


class ScopeDecisionUnchecked(TransactionError):
    """A ROLLBACK of an open transaction ``SCOPE//NAME`` in a cluster of broker groups whose
    scope has no mark in this group, while another broker group that may hold the scope's
    decision could not be asked (no primary during an election, down, not answering):
    the decision may name the transaction for commit (docs/transactions.md, *Scopes*), so
    the ROLLBACK is not taken before the answer. Retriable: roll back again once that
    group answers."""

    code = 48
    retriable = True
