"""A throwaway local PostgreSQL server: the embedded default for the demo, tests and benchmarks.

initdb into a directory, start on a free loopback port with password (scram) auth,
stop and remove. PostgreSQL refuses to run as root, so as root the server runs as
the `postgres` user (created by Debian's package) via runuser.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pgcdc.errors import SetupError

SUPERUSER = "postgres"


def find_bindir() -> Path:
    """Directory holding initdb/pg_ctl: PGCDC_PG_BINDIR, else Debian's newest, else PATH."""
    explicit = os.environ.get("PGCDC_PG_BINDIR")
    candidates = [explicit] if explicit else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    for cand in candidates:
        if cand and (Path(cand) / "initdb").exists() and (Path(cand) / "pg_ctl").exists():
            return Path(cand)
    raise SetupError("PostgreSQL server binaries (initdb, pg_ctl) not found; run `make setup` "
                     "(installs Debian's postgresql package) or set PGCDC_PG_BINDIR")


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> str | None:
    """The user to run the server as: none if we are not root, else `postgres`."""
    if os.geteuid() != 0:
        return None
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        raise SetupError("running as root and there is no `postgres` user to start PostgreSQL as; "
                         "install Debian's postgresql package (make setup) or run as a normal user") from None
    return "postgres"


@dataclass
class LocalPostgres:
    """One local cluster. `start()` creates it if needed; `stop(remove=True)` throws it away."""

    workdir: Path  # created if absent; holds data/ and belongs to the server's user
    port: int = field(default_factory=free_port)
    password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    durable: bool = False  # False: fsync off, for tests; True: real commit cost, for benchmarks
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def datadir(self) -> Path:
        return self.workdir / "data"

    def dsn(self, dbname: str = "postgres", user: str = SUPERUSER, password: str | None = None) -> str:
        pw = self.password if password is None else password
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user={user} password={pw}"

    def _cmd(self, args: list[str]) -> list[str]:
        user = _run_as()
        return ["runuser", "-u", user, "--", *args] if user else args

    def _check(self, args: list[str], what: str) -> None:
        proc = subprocess.run(self._cmd(args), capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise SetupError(f"{what} failed for local PostgreSQL in {self.datadir}: " + " | ".join(tail))

    def init(self) -> None:
        """initdb with scram auth on TCP and the generated superuser password."""
        bindir = find_bindir()
        self.workdir.mkdir(parents=True, exist_ok=True)
        pwfile = self.workdir / "pwfile"
        pwfile.write_text(self.password + "\n")
        user = _run_as()
        if user:  # the workdir's ancestors must be traversable by that user (/tmp is)
            shutil.chown(self.workdir, user)
            shutil.chown(pwfile, user)
        try:
            self._check([str(bindir / "initdb"), "-D", str(self.datadir), "-U", SUPERUSER, "-E", "UTF8",
                         "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256",
                         f"--pwfile={pwfile}", "--no-sync"], "initdb")
        finally:
            pwfile.unlink(missing_ok=True)
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.datadir}'",
            "max_connections": "100",
            "max_prepared_transactions": "10",
            "wal_level": "replica",
            "max_wal_senders": "4",
            "shared_buffers": "128MB",
        }
        if not self.durable:
            conf |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        conf |= self.settings
        with open(self.datadir / "postgresql.conf", "a") as f:
            f.write("\n# pgcdc local server\n" + "".join(f"{k} = {v}\n" for k, v in conf.items()))
        with open(self.datadir / "pg_hba.conf", "a") as f:
            f.write("host replication all 127.0.0.1/32 scram-sha-256\n")

    def start(self) -> "LocalPostgres":
        """Create the cluster if absent, then start it and wait until it accepts connections."""
        if not (self.datadir / "PG_VERSION").exists():
            self.init()
        bindir = find_bindir()
        self._check([str(bindir / "pg_ctl"), "-D", str(self.datadir), "-l", str(self.datadir / "server.log"),
                     "-o", f"-p {self.port}", "-w", "-t", "60", "start"], "pg_ctl start")
        return self

    def start_standby_of(self, primary: "LocalPostgres") -> "LocalPostgres":
        """Make this cluster a streaming hot standby of `primary` (pg_basebackup -R) and start it."""
        bindir = find_bindir()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.password = primary.password
        user = _run_as()
        if user:
            shutil.chown(self.workdir, user)
        env = os.environ | {"PGPASSWORD": primary.password}
        proc = subprocess.run(self._cmd([str(bindir / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary.port),
                                         "-U", SUPERUSER, "-D", str(self.datadir), "-R", "-X", "stream",
                                         # an immediate checkpoint: a spread one waits up to
                                         # minutes after the primary wrote much
                                         "--checkpoint=fast", "--no-sync"]), capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise SetupError(f"pg_basebackup failed: {proc.stderr.strip()[-300:]}")
        with open(self.datadir / "postgresql.conf", "a") as f:
            # feedback: the primary keeps rows the standby's open snapshots need, so long reads
            # (a first-sync copy) are not cancelled by recovery conflicts
            f.write(f"unix_socket_directories = '{self.datadir}'\nhot_standby = on\nhot_standby_feedback = on\n")
        return self.start()

    def stop(self, remove: bool = False) -> None:
        """Stop fast; with remove=True also delete the workdir."""
        if (self.datadir / "postmaster.pid").exists():
            subprocess.run(self._cmd([str(find_bindir() / "pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w",
                                      "stop"]), capture_output=True)
        if remove:
            shutil.rmtree(self.workdir, ignore_errors=True)
