"""What a storage URL names, read without touching the storage: SQLite (one host), a
journal file (shared file system) or a database server (PostgreSQL/MySQL...); its one-line
errors, and the URL masked for output (`mask_url`: passwords never reach output). Opening
it is storage.py's.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import UsageError

_URL = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*):(?P<rest>.*)$", re.IGNORECASE)
_SERVER_SCHEMES = ("postgresql", "postgres", "mysql", "mariadb", "oracle", "mssql", "cockroachdb")


def mask_url(url: str) -> str:
    """postgresql://user:secret@host/db -> postgresql://user:***@host/db

    Works on any text (a URL, or an error message quoting one), copes with passwords that
    hold an unencoded '@', ':' or '/', and masks `password=...` (query strings, libpq).
    """

    def one(m: re.Match[str]) -> str:
        pre, rest = m["pre"], m["rest"]
        first = rest.find("@")
        if first < 0:
            return m[0]
        host_end = len(rest)
        for sep in "/?#":
            at = rest.find(sep, first)
            if at >= 0:
                host_end = min(host_end, at)
        last = rest.rfind("@", 0, host_end)
        user, colon, _ = rest[:last].partition(":")
        if not colon or "/" in user:
            return m[0]
        return f"{pre}{user}:***@{rest[last + 1 :]}"

    text = re.sub(r"(?P<pre>[A-Za-z][A-Za-z0-9+.-]*://)(?P<rest>[^\s'\"]+)", one, str(url))
    return re.sub(r"(?i)(password\s*=\s*)('[^']*'|\"[^\"]*\"|[^&\s;'\"]+)", r"\1***", text)


def is_journal(url: str) -> bool:
    return url.startswith("journal:") or url.endswith((".journal", ".log"))


def journal_path(url: str) -> Path:
    return Path(url.split(":", 1)[1].removeprefix("//") if url.startswith("journal:") else url)


def file_missing(url: str) -> bool:
    """A SQLite or journal storage whose file is not there: nothing stored yet. Reading commands
    say so instead of opening it, which would create an empty database in the user's folder."""
    if is_journal(url):
        return not journal_path(url).exists()
    if url.startswith("sqlite:///") and not in_memory(url):
        return not Path(url[len("sqlite:///") :].split("?", 1)[0]).exists()
    return False


def check_url(url: str) -> None:
    """Reject a storage URL that cannot work, without touching it (fast, writes nothing)."""
    if url == "memory:":
        return
    if is_journal(url):
        path = journal_path(url)
        if not str(path) or str(path) in (".", "/") or path.is_dir():
            raise UsageError(
                f"storage {mask_url(url)}: name a journal file, e.g. journal:///shared/study.journal"
            )
        if not path.parent.exists():
            raise UsageError(
                f"storage {mask_url(url)}: folder {path.parent} does not exist; create it "
                "(on a file system every worker mounts)"
            )
        return
    m = _URL.match(url)
    if not m or m["scheme"].lower() in ("http", "https", "file") or not m["rest"].startswith("//"):
        raise UsageError(
            f"storage '{mask_url(url)}' is not a URL Optuna can use; try "
            "sqlite:///ipu-autotune.db, journal:///shared/study.journal or "
            "postgresql://user@host/db"
        )
    scheme = m["scheme"].lower().split("+")[0]
    if scheme == "sqlite":
        db = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        if not db:
            raise UsageError(
                f"storage {mask_url(url)}: write sqlite:///relative/file.db or "
                "sqlite:////absolute/file.db"
            )
        if db != ":memory:" and not Path(db).resolve().parent.exists():
            raise UsageError(f"storage {mask_url(url)}: folder {Path(db).parent} does not exist")
        return
    if scheme not in _SERVER_SCHEMES:
        raise UsageError(
            f"storage '{mask_url(url)}': unknown database '{m['scheme']}'; use sqlite:///FILE, "
            "journal:///FILE or postgresql://user@host/db"
        )
    try:
        from sqlalchemy.engine import make_url

        make_url(normalise_url(url))
    except Exception as exc:  # ArgumentError, ValueError (bad port)...
        raise UsageError(
            f"storage '{mask_url(url)}' cannot be parsed: {mask_url(first_line(exc))}"
        ) from None


def normalise_url(url: str) -> str:
    """postgres://... (Heroku's spelling) is postgresql://... to SQLAlchemy."""
    return "postgresql" + url[len("postgres") :] if url.startswith("postgres:") else url


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


#: the database a URL's scheme names -> (the module SQLAlchemy imports by default, how to
#: install a driver)
_DRIVERS = {
    "postgresql": ("psycopg", "pip install 'ipu-autotune[postgres]'"),
    "cockroachdb": ("psycopg", "pip install 'ipu-autotune[postgres]' sqlalchemy-cockroachdb"),
    "mysql": (
        "MySQLdb",
        "pip install mysqlclient, or write mysql+pymysql://... and pip install pymysql",
    ),
    "mariadb": (
        "MySQLdb",
        "pip install mysqlclient, or write mariadb+pymysql://... and pip install pymysql",
    ),
    "oracle": ("oracledb", "pip install oracledb"),
    "mssql": ("pyodbc", "pip install pyodbc"),
}


def missing_driver(url: str, exc: ImportError) -> str:
    """'missing database driver for mysql (MySQLdb); pip install mysqlclient, ...': the
    database named from the URL, since the ImportError Optuna passes on may not name the
    module (its `name` is then None)."""
    scheme = normalise_url(url).split(":", 1)[0].lower()
    database, _, dialect_driver = scheme.partition("+")
    default_module, fix = _DRIVERS.get(
        database, (None, f"install the Python driver for {database}")
    )
    module = exc.name or dialect_driver or default_module
    if dialect_driver:  # the user chose a driver: install that one
        fix = f"pip install {dialect_driver}"
    return (
        f"missing database driver for {database}" + (f" ({module})" if module else "") + f"; {fix}"
    )


def in_memory(url: str) -> bool:
    """memory: or sqlite:///:memory:, a storage only this process sees and that goes with it."""
    return url == "memory:" or url.split("?", 1)[0] == "sqlite:///:memory:"
