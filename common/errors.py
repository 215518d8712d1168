"""Error types for bad user input. CLIs turn them into a one-line message and exit code 2."""


class MoeAppsError(Exception):
    """Base class: something the user supplied (a file, an argument, data) is wrong."""


class DataError(MoeAppsError):
    """A data file or directory is missing, unreadable, malformed or fails its checksum."""


class InputError(MoeAppsError):
    """An argument or input value is invalid (wrong shape, NaN, unknown category, ...)."""


class CheckpointError(MoeAppsError):
    """A checkpoint is missing, corrupt, or does not match the model it is loaded into."""
