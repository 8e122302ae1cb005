"""Child process of tests/sqlite_vfs.rs: drives SQLite through the nvstack VFS.

Run with Debian's /usr/bin/python3 (its sqlite3 module can load extensions). Every mode
prints one JSON document per line on stdout; the Rust test asserts on them.

    sqlite_vfs_child.py EXT DB REGION MODE [ARGS...]

MODE
  commit JOURNAL_MODE [EXTRA_URI [PACE_US]]
                                   commit single-row transactions until killed (or power cut),
                                   printing {"committed": ID} after each commit returns and
                                   {"files": [...]} (the database directory's listing, taken
                                   inside a transaction) now and then; PACE_US: a pause after
                                   each commit (power cuts: the simulated region logs every
                                   store in memory, so keep the run to a few hundred commits)
  check                            {"ids": [...], "integrity": "ok", "files": [...],
                                   "at_open": [...]} (at_open: the region's files before
                                   SQLite looked, i.e. what recovery had to work from)
  hold                             open, print {"ready": true}, wait for stdin to close
  open                             try to open; {"ok": true} or {"error", "code", "nvstack"}
  workload JOURNAL_MODE N          N transactions of several rows with listings inside them
  fill                             grow the WAL in one transaction until SQLITE_FULL
"""

import json
import os
import signal
import sqlite3
import sys
import time

# A last resort: the test kills every child itself (and under a deadline), but if the test
# process dies first, no child outlives it by more than this (SIGALRM ends the process).
DEADLINE_S = 300


def out(doc):
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def listing(db):
    d = os.path.dirname(os.path.abspath(db))
    names = []
    for root, _dirs, files in os.walk(d):
        for f in files:
            names.append(os.path.relpath(os.path.join(root, f), d))
    return sorted(names)


def main():
    signal.alarm(DEADLINE_S)
    ext, db, region, mode = sys.argv[1:5]
    args = sys.argv[5:]
    loader = sqlite3.connect(":memory:")
    loader.enable_load_extension(True)
    loader.load_extension(ext)

    def last_error():
        return loader.execute("select nvstack_last_error()").fetchone()[0]

    def uri(extra=""):
        u = f"file:{db}?vfs=nvstack"
        if region:
            u += f"&region={region}"
        return u + extra

    def connect(extra=""):
        return sqlite3.connect(uri(extra), uri=True, isolation_level=None, timeout=0)

    if mode == "commit":
        journal_mode = args[0]
        extra = args[1] if len(args) > 1 else ""
        pace = int(args[2]) / 1e6 if len(args) > 2 else 0
        c = connect(extra)
        # What the region holds before SQLite looks (a hot journal or WAL left by the crash).
        at_open = json.loads(loader.execute("select nvstack_stats()").fetchone()[0])
        c.execute(f"pragma journal_mode={journal_mode}")
        c.execute("pragma synchronous=full")
        c.execute("create table if not exists t(id integer primary key, pad blob)")
        nxt = (c.execute("select max(id) from t").fetchone()[0] or 0) + 1
        out({"start": nxt, "at_open": at_open[0]["files"] if at_open else []})
        while True:
            c.execute("begin immediate")
            c.execute("insert into t(id, pad) values(?, randomblob(?))", (nxt, 50 + nxt % 700))
            if nxt % 16 == 0:
                out({"files": listing(db)})
            c.execute("commit")
            out({"committed": nxt})
            nxt += 1
            if pace:
                time.sleep(pace)
    elif mode == "check":
        c = connect(args[0] if args else "")
        at_open = json.loads(loader.execute("select nvstack_stats()").fetchone()[0])
        ids = [r[0] for r in c.execute("select id from t order by id")]
        integrity = c.execute("pragma integrity_check").fetchone()[0]
        out({"ids": ids, "integrity": integrity, "files": listing(db),
             "at_open": at_open[0]["files"] if at_open else []})
        c.close()
        out({"closed_files": listing(db)})
    elif mode == "hold":
        c = connect(args[0] if args else "")
        c.execute("pragma journal_mode=wal")
        c.execute("create table if not exists t(id integer primary key, pad blob)")
        out({"ready": True})
        sys.stdin.read()
        c.close()
    elif mode == "open":
        try:
            c = connect(args[0] if args else "")
            c.execute("pragma journal_mode=wal").fetchone()
            c.execute("create table if not exists t(id integer primary key, pad blob)")
            out({"ok": True})
        except sqlite3.Error as e:
            out({"error": str(e), "code": getattr(e, "sqlite_errorcode", None),
                 "nvstack": last_error()})
    elif mode == "workload":
        journal_mode, n = args[0], int(args[1])
        c = connect()
        got = c.execute(f"pragma journal_mode={journal_mode}").fetchone()[0]
        c.execute("pragma synchronous=full")
        c.execute("create table if not exists t(id integer primary key, pad blob)")
        seen = set(listing(db))
        for i in range(n):
            c.execute("begin")
            for _ in range(5):
                c.execute("insert into t(pad) values(randomblob(3000))")
            seen.update(listing(db))
            c.execute("commit")
            seen.update(listing(db))
        c.execute("update t set pad = randomblob(100) where id % 3 = 0")
        seen.update(listing(db))
        count = c.execute("select count(*) from t").fetchone()[0]
        integrity = c.execute("pragma integrity_check").fetchone()[0]
        stats = json.loads(loader.execute("select nvstack_stats()").fetchone()[0])
        c.close()
        seen.update(listing(db))
        out({"journal_mode": got, "count": count, "integrity": integrity,
             "seen": sorted(seen), "stats": stats})
    elif mode == "fill":
        c = connect()
        c.execute("pragma journal_mode=wal")
        c.execute("pragma wal_autocheckpoint=0")
        c.execute("create table if not exists t(id integer primary key, pad blob)")
        c.execute("insert into t(pad) values(randomblob(10))")
        before = c.execute("select count(*) from t").fetchone()[0]
        try:
            c.execute("begin")
            for _ in range(100000):
                c.execute("insert into t(pad) values(randomblob(4000))")
            c.execute("commit")
            out({"full": False})
        except sqlite3.Error as e:
            code = getattr(e, "sqlite_errorcode", None)
            try:
                c.execute("rollback")
            except sqlite3.Error:
                pass
            after = c.execute("select count(*) from t").fetchone()[0]
            integrity = c.execute("pragma integrity_check").fetchone()[0]
            c.execute("insert into t(pad) values(randomblob(10))")
            out({"full": True, "error": str(e), "code": code, "nvstack": last_error(),
                 "before": before, "after": after, "integrity": integrity})
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
