"""Project error types. Each message tells the user what went wrong and what to do about it."""

from __future__ import annotations


class CdcEnrichError(Exception):
    """Base class for every error the service raises on purpose."""


class PipelineConfigError(CdcEnrichError):
    """A pipeline file is invalid; the message names the file, line and field."""


class StackError(CdcEnrichError):
    """The local stack (Kafka broker, PostgreSQL, connector) could not be started or reached."""


class SetupError(CdcEnrichError):
    """Something `make setup` should have installed is missing (jars, venv)."""


class VerificationError(CdcEnrichError):
    """Gold does not equal the oracle join; the message carries the per-view differences."""


class UnknownNameError(PipelineConfigError, KeyError):
    """A name (source, view, column, alias, table) that the pipeline does not declare.

    A KeyError too, so that lookups keep their usual contract; printed as its message."""

    __str__ = BaseException.__str__


class StreamError(CdcEnrichError):
    """A streaming query failed (or could not start); the others of its run were stopped.

    The message names the stream and what to do (rerun: the checkpoints resume it)."""


class TableLayoutError(CdcEnrichError):
    """A table exists with another layout than the pipeline now declares; the message says how to rebuild it."""


class OrderingError(CdcEnrichError, ValueError):
    """A change's source position cannot become a sequence (decoding quarantines the record with this reason)."""
