"""Which trial owns which point of the space, so that many workers never evaluate a point twice.

Optuna assigns trial numbers atomically but gives no way to claim a parameter value: two workers
reading the study at once may both pick the same next point (GridSampler says so in its docs).
Optuna's own exact route, one enqueued trial per point, costs ~28 ms per point on SQLite (measured:
13.6 min before the first trial of hw=phaze_grid's 29,360 points). A claim is instead one row in a
table of the study's own database whose primary key is (study, point): the database lets exactly
one insert win. A trial that dies after claiming keeps its claim; its retry (same point, new
number, from Optuna's RetryHeartbeatStaleTrialCallback) takes the claim over with a compare-and-swap.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

TABLE = "phaze_point_claims"
PASSED_OVER = -1
"""The owner of a point that a worker's bound dismissed (a claim no trial holds): decided, never proposed again."""
RETRY_HISTORY_ATTR = "retry_history"
"""System attribute that Optuna's RetryHeartbeatStaleTrialCallback gives a retry: the numbers of the failed trials
it retries (the original first); a retry whose original died before recording its point inherits its claim."""
SQLITE_BUSY_TIMEOUT_S = 20.0
"""How long an SQLite writer waits for another process's lock: sqlite3's default of 5 s is short for
several workers writing trials, heartbeats and claims into one file on a loaded machine; much longer
only delays the exit of a process whose lock was left held by a hard interrupt."""


SQLITE_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL")
"""Write-ahead log without an fsync per commit: a search commits several small transactions per trial
(trial, claim, attributes, heartbeat) and a rollback-journal fsync each made those most of a pruned
trial's time. A killed process loses nothing committed (the log is in the OS cache); only a power
cut may drop the last few trials, which a resumed search re-runs (SQLite's WAL documentation)."""


def tune_sqlite(engine: sa.engine.Engine) -> sa.engine.Engine:
    """Apply SQLITE_PRAGMAS to every connection of an SQLite engine (new ones: the pool is emptied)."""
    if engine.dialect.name == "sqlite":
        def on_connect(dbapi_connection, _record):
            cursor = dbapi_connection.cursor()
            for pragma in SQLITE_PRAGMAS:
                cursor.execute(pragma)
            cursor.close()

        sa.event.listen(engine, "connect", on_connect)
        engine.dispose()
    return engine


SKIP_CONFLICTS = {
    "sqlite": lambda table: sqlite_insert(table).on_conflict_do_nothing(),
    "postgresql": lambda table: postgresql_insert(table).on_conflict_do_nothing(),
    "mysql": lambda table: table.insert().prefix_with("IGNORE"),
    "mariadb": lambda table: table.insert().prefix_with("IGNORE"),
}
"""Per SQLAlchemy dialect, an insert that skips the rows whose key exists instead of failing."""


class PointTaken(Exception):
    """The trial's point is claimed by another live or finished trial: nothing to evaluate."""


class LocalClaims:
    """Claims of one process (an in-memory study has no other worker)."""

    def __init__(self):
        self.owners: dict[int, int] = {}

    def owners_by_point(self) -> dict[int, int]:
        """Every claimed point and the trial number holding it."""
        return dict(self.owners)

    def claim(self, point: int, trial_number: int) -> bool:
        """Whether the trial won the point."""
        if point in self.owners:
            return False
        self.owners[point] = trial_number
        return True

    def owner(self, point: int) -> int | None:
        """The trial number holding the point, None if free."""
        return self.owners.get(point)

    def count(self) -> int:
        """Points claimed so far."""
        return len(self.owners)

    def claim_many(self, points, trial_number: int) -> None:
        """Claim every free one of the points for the trial (the others keep their owners)."""
        for point in points:
            self.owners.setdefault(point, trial_number)

    def release(self, point: int, old: int) -> None:
        """Drop trial `old`'s claim on the point."""
        if self.owners.get(point) == old:
            del self.owners[point]

    def take_over(self, point: int, old: int, new: int) -> bool:
        """Move the claim from trial `old` to `new`, if `old` still holds it."""
        if self.owners.get(point) != old:
            return False
        self.owners[point] = new
        return True


class DatabaseClaims:
    """Claims in the study's database (SQLite, PostgreSQL, MySQL: any SQLAlchemy URL Optuna accepts)."""

    def __init__(self, url: str, study_name: str):
        connect_args = {"timeout": SQLITE_BUSY_TIMEOUT_S} if url.startswith("sqlite") else {}
        self.engine = tune_sqlite(sa.create_engine(url, connect_args=connect_args))
        self.study_name = study_name
        meta = sa.MetaData()
        self.table = sa.Table(
            TABLE, meta,
            sa.Column("study_name", sa.String(512), primary_key=True),
            sa.Column("point", sa.Integer, primary_key=True),
            sa.Column("trial_number", sa.Integer, nullable=False),
        )
        try:
            meta.create_all(self.engine)
        except (OperationalError, ProgrammingError, IntegrityError):
            # another process created the table between the existence check and CREATE TABLE
            meta.create_all(self.engine)

    def owners_by_point(self) -> dict[int, int]:
        """Every claimed point of the study and the trial number holding it."""
        t = self.table
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.point, t.c.trial_number).where(t.c.study_name == self.study_name))
            return {int(p): int(n) for p, n in rows}

    def owner(self, point: int) -> int | None:
        """The trial number holding the point, None if free."""
        t = self.table
        with self.engine.connect() as conn:
            return conn.execute(sa.select(t.c.trial_number).where(t.c.study_name == self.study_name, t.c.point == point)).scalar()

    def count(self) -> int:
        """Points claimed so far, by all workers."""
        t = self.table
        with self.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(t).where(t.c.study_name == self.study_name)).scalar()

    def release(self, point: int, old: int) -> None:
        """Drop trial `old`'s claim on the point (it died before recording the point)."""
        t = self.table
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.study_name == self.study_name, t.c.point == point, t.c.trial_number == old))

    def claim(self, point: int, trial_number: int) -> bool:
        """Whether this insert won the point."""
        try:
            with self.engine.begin() as conn:
                conn.execute(self.table.insert().values(study_name=self.study_name, point=point, trial_number=trial_number))
            return True
        except IntegrityError:
            return False

    def claim_many(self, points, trial_number: int) -> None:
        """Claim every free one of the points for the trial in one transaction (the others keep their owners): an
        insert that skips conflicting rows where the database has one, else one claim per point."""
        rows = [{"study_name": self.study_name, "point": int(p), "trial_number": trial_number} for p in points]
        if not rows:
            return
        dialect = self.engine.dialect.name
        if dialect in SKIP_CONFLICTS:
            with self.engine.begin() as conn:
                conn.execute(SKIP_CONFLICTS[dialect](self.table), rows)
            return
        for row in rows:
            self.claim(row["point"], trial_number)

    def take_over(self, point: int, old: int, new: int) -> bool:
        """Move a claim from trial `old` (dead) to `new`; false if someone else moved it first."""
        t = self.table
        with self.engine.begin() as conn:
            result = conn.execute(
                t.update().where(t.c.study_name == self.study_name, t.c.point == point, t.c.trial_number == old).values(trial_number=new)
            )
            return result.rowcount == 1


def claims_for(storage: str | None, study_name: str) -> LocalClaims | DatabaseClaims:
    """Claims kept where the study is: in the process for an in-memory study, else in its database."""
    return LocalClaims() if storage is None else DatabaseClaims(storage, study_name)
