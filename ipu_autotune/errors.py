"""Errors the user can fix. The CLI prints them as one line and exits with code 2."""


class UsageError(Exception):
    """Bad input: a config, a flag, a file, a storage URL. The message names the fix."""

    exit_code = 2
