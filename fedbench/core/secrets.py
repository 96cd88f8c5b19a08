"""Passwords in store URIs are never recorded or printed (issues 32 and 42).

One parser reads a URI's password as the library that connects with it does (`split_password`):
SQLAlchemy's make_url for a database URI (a password runs to the first '@' and may hold '/', '#',
'?'), urllib for HTTP (requests takes credentials through it). Two boundaries, one rule each:
- In: `withhold` takes the secrets out of the overrides before Hydra composes the config: the
  password of `tracking.uri=` stays in this process's environment (FEDBENCH_TRACKING_PASSWORD,
  inherited by the MLflow writer and by launcher workers), and a secret variable set through Hydra
  (`+hydra.job.env_set.MLFLOW_TRACKING_PASSWORD=`) goes to the environment directly. The config,
  the MLflow params, tags and config.yaml then hold the URI without it; `reveal` puts it back only in
  the URI handed to MLflow's client. A resumed run reads the recorded URI (no password) and gets it
  from FEDBENCH_TRACKING_PASSWORD, or from the libraries' own channels, which need nothing of
  fedbench: MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD for an MLflow server, PGPASSWORD or
  ~/.pgpass for PostgreSQL.
- Out: `redact` rewrites any text so that no URI password, no password-like query parameter and no
  password fedbench was given shows: `install` applies it to this process's stdout/stderr and to
  every log record (Hydra's job log files included), runs.hydra_app.install_hydra_redaction to the .hydra/ files
  Hydra writes (a password from a --config-dir or FEDBENCH_CONF file included), the recorder to what
  it sends to MLflow, the report to its pages and files.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

PASSWORD_ENV = "FEDBENCH_TRACKING_PASSWORD"
# the libraries' own password variables: their values are redacted too
KNOWN_SECRET_ENVS = (PASSWORD_ENV, "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "PGPASSWORD")
MASK = "***"
SECRET_PARAMS = ("password", "passwd", "pwd", "pass", "secret", "token", "access_token", "api_key", "apikey")

# scheme://user:password@host: the password runs to the last '@' before the path (an unencoded '@'
# or '/' in it is still masked; a false match masks text that was no password, never the reverse)
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*):(?P<pw>[^\s'\"]*)@(?=[^\s@'\"]*(?:[\s'\"]|$))")
_USERINFO_SHORT = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*):(?P<pw>[^\s@'\"/]*)@")
_QUERY = re.compile(r"(?P<head>[?&;](?:%s)=)(?P<pw>[^&#\s'\"]*)" % "|".join(SECRET_PARAMS), re.IGNORECASE)


def redact(text: str) -> str:
    """`text` with every URI password, password-like query value and known password masked."""
    if not isinstance(text, str) or not text:
        return text
    for env in KNOWN_SECRET_ENVS:  # a password fedbench holds, wherever a library echoes it
        secret = os.environ.get(env)
        if secret and len(secret) >= 4 and secret in text:
            text = text.replace(secret, MASK)
    text = _USERINFO.sub(_masked, text)
    text = _USERINFO_SHORT.sub(_masked, text)
    return _QUERY.sub(_masked, text)


def _masked(match: re.Match) -> str:
    pw = match.group("pw")
    end = match.group(0)[len(match.group("head")) :]
    if not pw or pw == MASK:
        return match.group(0)
    return match.group("head") + end.replace(pw, MASK, 1)


# -- in: the password leaves the config ------------------------------------------------------


HTTP_SCHEMES = ("http", "https")


def is_database_uri(uri: str) -> bool:
    """A URI SQLAlchemy reads (MLflow's database stores): any scheme but a file, sqlite or HTTP one."""
    scheme = uri.partition("://")[0].split("+")[0].lower()
    return "://" in uri and scheme not in (*HTTP_SCHEMES, "file", "sqlite", "databricks", "")


def database_url(uri: str):
    """SQLAlchemy's own reading of a database URI (the one its engine, hence MLflow, connects with):
    a password runs to the first '@' and may hold '/', '#' or '?'. A URI it cannot read is refused
    in one line that shows no password."""
    from sqlalchemy.engine import make_url

    from fedbench.core.errors import ConfigError

    try:
        return make_url(uri)
    except Exception as exc:  # ArgumentError, or ValueError for a port that is no number
        raise ConfigError(f"the store URI {redact(uri)} is not one SQLAlchemy can read ({redact(str(exc))}); "
                          "percent-encode a password's reserved characters (e.g. '@' as %40, ':' as %3A)") from None


def split_password(uri: str) -> tuple[str, str | None]:
    """(the URI without its password, the password or None): userinfo `user:pw@` or a password
    query parameter, read as the library that connects reads it: SQLAlchemy's make_url for a
    database URI, urllib for HTTP (requests takes a URL's credentials through urllib.parse)."""
    if "://" not in uri:
        return uri, None
    if is_database_uri(uri):
        return _split_database_password(uri)
    parts = urlsplit(uri)
    password = None
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, colon, pw = userinfo.partition(":")
        if colon:
            password = unquote(pw)
            netloc = f"{user}@{host}" if user else host
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        kept = [(k, v) for k, v in pairs if k.lower() not in SECRET_PARAMS]
        if len(kept) != len(pairs):
            password = password or next(v for k, v in pairs if k.lower() in SECRET_PARAMS)
            query = urlencode(kept)
    if password is None:
        return uri, None
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)), password


def _split_database_password(uri: str) -> tuple[str, str | None]:
    from sqlalchemy.engine import URL

    url = database_url(uri)
    secret_keys = [k for k in url.query if k.lower() in SECRET_PARAMS]
    password = url.password if url.password is not None else None
    if password is None and secret_keys:
        value = url.query[secret_keys[0]]
        password = value if isinstance(value, str) else value[0]
    if password is None:
        return uri, None
    public = URL.create(url.drivername, url.username, None, url.host, url.port, url.database,
                        {k: v for k, v in url.query.items() if k not in secret_keys})
    return public.render_as_string(hide_password=False), password


def store_address(uri: str) -> tuple[str, str | None, int | None]:
    """(scheme without driver, host, port) of a server or database URI, read by the same parser as
    `split_password`."""
    scheme = uri.partition("://")[0].split("+")[0].lower()
    if is_database_uri(uri):
        url = database_url(uri)
        return scheme, url.host, url.port
    parsed = urlsplit(uri)
    try:
        port = parsed.port
    except ValueError:
        port = None
    return scheme, parsed.hostname, port


def withhold_uri(uri: str) -> str:
    """`uri` without its password, which is kept in PASSWORD_ENV for `reveal`."""
    if "://" not in uri:
        return uri
    public, password = split_password(uri)
    if password is not None:
        os.environ[PASSWORD_ENV] = password
    return public


ENV_SET = "hydra.job.env_set."


def is_secret_name(name: str) -> bool:
    """An environment variable or setting whose value is a secret (MLFLOW_TRACKING_PASSWORD, PGPASSWORD,
    an API token...)."""
    if name.upper() in KNOWN_SECRET_ENVS or name.lower() in SECRET_PARAMS:
        return True  # an environment variable's name is upper case: a setting such as max_tokens is none
    return name.isupper() and re.search(r"PASSW(OR)?D|SECRET|TOKEN|API_?KEY", name) is not None


def withhold(overrides: list[str]) -> list[str]:
    """The overrides with every secret taken out before Hydra records them in .hydra/: the password
    of `tracking.uri=...` (kept in PASSWORD_ENV), and a secret variable set through Hydra
    (`hydra.job.env_set.MLFLOW_TRACKING_PASSWORD=...`), which goes to this process's environment
    instead, where the job (and any worker it starts) finds it as Hydra would have set it."""
    out = []
    for item in overrides:
        key, eq, value = item.partition("=")
        name = key.lstrip("+~")
        quote_ = value[0] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else ""
        bare = value[1:-1] if quote_ else value
        if eq and name.startswith(ENV_SET) and is_secret_name(name[len(ENV_SET):]):
            if not key.startswith("~"):
                os.environ[name[len(ENV_SET):]] = bare
            continue
        if eq and name in ("tracking.uri", ENV_SET + "MLFLOW_TRACKING_URI"):
            item = f"{key}={quote_}{withhold_uri(bare)}{quote_}"
        out.append(item)
    return out


def reveal(uri: str) -> str:
    """The URI MLflow's client connects with: the withheld password put back when the URI has none
    (as userinfo when it names a user, else as PostgreSQL's and MySQL's `password` parameter)."""
    password = os.environ.get(PASSWORD_ENV)
    if not password or "://" not in uri or split_password(uri)[1] is not None:
        return uri
    if uri.startswith(("sqlite", "file")):
        return uri
    if is_database_uri(uri):
        url = database_url(uri)
        url = url.set(password=password) if url.username else url.update_query_dict({"password": password})
        return url.render_as_string(hide_password=False)
    parts = urlsplit(uri)
    if "@" in parts.netloc:
        user, _, host = parts.netloc.rpartition("@")
        return urlunsplit((parts.scheme, f"{user}:{quote(password, safe='')}@{host}", parts.path, parts.query, parts.fragment))
    query = urlencode([*parse_qsl(parts.query, keep_blank_values=True), ("password", password)])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


# -- out: nothing printed or logged shows one ---------------------------------------------------


class RedactingStream:
    """A text stream whose writes pass through `redact` (everything else is the stream's own)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        return self._stream.write(redact(text) if isinstance(text, str) else text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _redacting_factory(base):
    def factory(*args, **kwargs):
        record = base(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string is the logging module's to report
            return record
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return record

    factory.redacting = True
    return factory


def redact_value(value: str) -> str:
    """A config value as it may be written: the password of any URI in it masked, by the parser
    that reads the URI (split_password), then by the text rules of `redact`. A URI holds a password only
    as userinfo (`user:pw@`) or in its query: without '@' or '?' no parser is loaded (SQLAlchemy's costs a
    run's start-up, which leaves it to the writer process)."""
    if "://" in value and ("@" in value or "?" in value):
        try:
            public, password = split_password(value)
        except Exception:  # not a URI any library reads: the text rules below still apply
            password = None
        if password:
            value = value.replace(password, MASK) if password in value else public
    return redact(value)


def redact_tree(node, key: str = ""):
    """A plain config tree (dicts, lists, scalars) with every secret masked: the values of secret-named
    keys (an env_set PGPASSWORD, a `password:` entry) and the password of every URI."""
    if isinstance(node, dict):
        return {k: redact_tree(v, str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [redact_tree(v, key) for v in node]
    if isinstance(node, str):
        name, eq, value = node.partition("=")
        if eq and is_secret_name(name.rsplit(".", 1)[-1]) and " " not in name:  # an override `a.b.TOKEN=...`
            return f"{name}={MASK}"
        return MASK if key and is_secret_name(key) and node else redact_value(node)
    return node


def install() -> None:
    """Redact this process's stdout, stderr and log records (idempotent)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, RedactingStream):
            setattr(sys, name, RedactingStream(stream))
    base = logging.getLogRecordFactory()
    if not getattr(base, "redacting", False):
        logging.setLogRecordFactory(_redacting_factory(base))


def password_hint(uri: str) -> str:
    """Where a store's password comes from, for an error about a URI that names a user but holds
    no password (a resumed run's: fedbench never records one); '' for any other URI."""
    parts = urlsplit(uri) if "://" in uri else None
    if parts is None or not parts.username or os.environ.get(PASSWORD_ENV):
        return ""
    if parts.scheme.startswith("http"):
        own = "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
    elif parts.scheme.startswith("postgresql"):
        own = "PGPASSWORD or ~/.pgpass"
    else:
        own = "the database driver's own setting"
    return f" (fedbench records no password: give it in {PASSWORD_ENV}, or {own})"
