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
