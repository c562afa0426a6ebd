"""The SQLite event log: append-only, hash-chained, exactly-once, and honest about damage."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path

import pytest
from conftest import STARTED
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import STORED_CONFIG, stored_event_lists

from npu_deploy.events import InvalidEvent, NewEvent, canonical_json
from npu_deploy.store import (
    SCHEMA_VERSION,
    CommandAlreadyConsumed,
    EventStore,
    IdempotencyConflict,
    NewerSchema,
    NotAStore,
    RunLocked,
    StoreCorrupt,
    UnknownRun,
    export_run,
    import_run,
)


def msg(text: str, **kw) -> NewEvent:
    return NewEvent("agent.message", {"role": "assistant", "text": text}, actor="agent", **kw)


def raw(path: Path) -> sqlite3.Connection:
    """A plain connection, as someone tampering with the file would use."""
    return sqlite3.connect(path, isolation_level=None)


def test_appends_are_contiguous_linked_and_survive_reopening(store, db_path):
    with store.create_run(STARTED) as w:
        run_id = w.run_id
        first = w.append(msg("a", phase=0, attempt=1))
        batch = w.append_batch([msg("b"), msg("c")])
    assert [first.run_version, *[e.run_version for e in batch]] == [2, 3, 4]
    assert batch[0].prev_hash == first.hash and batch[1].prev_hash == batch[0].hash
    with EventStore.open(db_path, readonly=True) as again:
        events = list(again.events(run_id))
        assert [e.payload.get("text") for e in events[1:]] == ["a", "b", "c"]
        assert [e.seq for e in events] == sorted(e.seq for e in events)
        assert again.verify(run_id).ok


def test_the_store_uses_wal_full_sync_and_records_its_schema_version(store):
    conn = store.conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_sqlite_itself_refuses_update_and_delete_of_events(store, db_path):
    with store.create_run(STARTED) as w:
        w.append(msg("a"))
    conn = raw(db_path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE events SET payload = '{}' WHERE run_version = 2")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM events")


def test_a_retried_append_with_the_same_idempotency_key_returns_the_stored_event(store):
    with store.create_run(STARTED) as w:
        first = w.append(msg("tool output", idempotency_key="step-7"))
        again = w.append(msg("tool output", idempotency_key="step-7"))
        assert again == first and w.version == 2
        with pytest.raises(IdempotencyConflict, match="step-7"):
            w.append(msg("something else", idempotency_key="step-7"))
        # A retried batch skips what it already wrote and appends the rest.
        out = w.append_batch([msg("tool output", idempotency_key="step-7"), msg("new")])
        assert out[0] == first and out[1].run_version == 3


def test_a_batch_is_all_or_nothing(store, db_path):
    with store.create_run(STARTED) as w:
        w.append(msg("kept"))
        with pytest.raises(InvalidEvent, match="agent.message.role"):
            w.append_batch([msg("x"), NewEvent("agent.message", {"role": "?", "text": "y"})])
        with pytest.raises(CommandAlreadyConsumed):
            w.append_batch([msg("x"), msg("y")], consumes=[None, _consumed_command(store, w)])
        assert w.version == 3  # run.started, "kept", and the consuming decision
        more = w.append(msg("after"))
        assert more.run_version == 4 and w.state.last_hash == more.hash
    assert store.verify(w.run_id).ok


def _consumed_command(store, writer) -> str:
    command = store.post_command(writer.run_id, "approve")
    writer.append(NewEvent("human.decision", {"decision": "approve", "command_id": command},
                           actor="human"), consumes=command)
    return command


def test_an_inbox_command_is_recorded_exactly_once(store, db_path):
    with store.create_run(STARTED) as w:
        run_id = w.run_id
    command = store.post_command(run_id, "redirect", {"instruction": "use tile_n 64"})
    assert [c["command_id"] for c in store.pending_commands(run_id)] == [command]
    decision = NewEvent("human.decision", {"decision": "redirect", "command_id": command,
                                           "instruction": "use tile_n 64"},
                        actor="human", idempotency_key=f"inbox:{command}")
    with store.writer(run_id) as w:
        recorded = w.append(decision, consumes=command)
    assert store.pending_commands(run_id) == []
    # After a crash the conductor retries the same step: it gets the same event back.
    with store.writer(run_id) as w:
        assert w.append(decision, consumes=command) == recorded
        with pytest.raises(CommandAlreadyConsumed):
            w.append(NewEvent("human.decision", {"decision": "approve", "command_id": command},
                              actor="human"), consumes=command)
        assert w.version == 2
    with pytest.raises(sqlite3.IntegrityError, match="already consumed"):
        raw(db_path).execute("UPDATE inbox SET consumed_event_id = NULL")


def test_an_inbox_command_that_could_not_be_recorded_is_refused_when_posted(store):
    with store.create_run(STARTED) as w:
        run_id = w.run_id
    with pytest.raises(InvalidEvent, match="instruction"):
        store.post_command(run_id, "redirect")
    with pytest.raises(InvalidEvent, match="direction_id"):
        store.post_command(run_id, "pick", {"instruction": "x"})
    with pytest.raises(InvalidEvent, match="kind"):
        store.post_command(run_id, "merge")
    assert store.pending_commands(run_id) == []


def test_one_writer_per_run(store):
    with store.create_run(STARTED) as w:
        with pytest.raises(RunLocked, match=w.run_id):
            store.writer(w.run_id)
        assert store.is_locked(w.run_id)
    assert not store.is_locked(w.run_id)
    store.writer(w.run_id).close()


def test_a_writer_refuses_to_extend_a_tampered_chain(store, db_path):
    with store.create_run(STARTED) as w:
        w.append(msg("a"))
    conn = raw(db_path)
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute("UPDATE events SET payload = ? WHERE run_version = 2",
                 (canonical_json({"role": "assistant", "text": "b"}),))
    with pytest.raises(StoreCorrupt, match="v2"):
        store.writer(w.run_id)


def test_run_ids_resolve_from_unique_prefixes(store):
    a = store.create_run(STARTED, run_id="alpha-1")
    b = store.create_run(STARTED, run_id="alpha-2")
    a.close(), b.close()
    assert store.resolve_run("alpha-2") == "alpha-2"
    with pytest.raises(UnknownRun, match="several"):
        store.resolve_run("alpha")
    with pytest.raises(UnknownRun, match="no run 'beta'"):
        store.resolve_run("beta")
    with pytest.raises(UnknownRun):
        store.resolve_run("alpha_")  # '_' is not a LIKE wildcard here


def test_snapshots_are_only_a_cache(store, db_path):
    with store.create_run(STARTED) as w:
        w.append_batch([msg(str(i), phase=0, attempt=1) for i in range(50)])
        run_id = w.run_id
    assert store.conn.execute("SELECT count(*) FROM snapshots").fetchone()[0] == 1
    with_snapshot = store.fold(run_id)
    assert with_snapshot == store.fold(run_id, use_snapshots=False)
    # A snapshot that does not sit on the chain (here: a wrong hash) is ignored.
    conn = raw(db_path)
    conn.execute("UPDATE snapshots SET hash = 'x', state = '{}'")
    assert store.fold(run_id) == with_snapshot
    conn.execute("DELETE FROM snapshots")
    assert store.fold(run_id) == with_snapshot
    assert store.fold(run_id, upto_version=10).version == 10


def test_blobs_are_content_addressed_compressed_and_checked_on_read(store, db_path):
    data = bytes(range(256)) * 400
    ref = store.put_blob(data)
    assert store.put_blob(data) == ref and ref.startswith("sha256:")
    assert store.get_blob(ref) == data
    size = store.conn.execute("SELECT length(data) FROM blobs").fetchone()[0]
    assert size < len(data) / 10
    conn = raw(db_path)
    conn.execute("DROP TRIGGER blobs_immutable")
    conn.execute("UPDATE blobs SET codec = 'raw', data = ?", (b"other",))
    with pytest.raises(StoreCorrupt, match="does not match its digest"):
        store.get_blob(ref)


def test_stored_older_schema_events_are_upcast_on_read_and_still_verify(store, db_path):
    """An event written under model.called schema 1 reads in the current form."""
    from npu_deploy.events import seal

    with store.create_run(STARTED) as w:
        run_id, head = w.run_id, w.state
    v1 = {"model": "claude", "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.01,
          "stop_reason": "end_turn", "duration_s": 1.5}
    old = seal(NewEvent("model.called", v1, actor="agent"), run_id=run_id, run_version=2,
               prev_hash=head.last_hash, schema_version=1, payload_json=canonical_json(v1))
    conn = raw(db_path)
    conn.execute("BEGIN")
    from npu_deploy.store.writer import insert_row
    insert_row(conn, old)
    conn.execute("UPDATE runs SET head_version = 2, head_hash = ? WHERE run_id = ?",
                 (old.hash, run_id))
    from npu_deploy.store.anchor import anchor_head, signing_key
    anchor_head(conn, signing_key(), run_id)      # as npu-deploy's writer did then
    conn.execute("COMMIT")
    event = store.event_at(run_id, 2)
    assert event.schema_version == 1 and event.payload["cache_read_tokens"] == 0
    report = store.verify(run_id)
    assert report.ok and report.state.totals.input_tokens == 10


def test_tail_polls_cost_one_pragma_when_nothing_changed(store, db_path):
    with store.create_run(STARTED) as w:
        run_id = w.run_id
        reader = EventStore.open(db_path, readonly=True)
        seen = reader.tail(run_id, 0)
        assert [e.run_version for e in seen] == [1]
        statements: list[str] = []
        reader.conn.set_trace_callback(statements.append)
        assert reader.tail(run_id, seen[-1].seq) == []
        assert reader.tail(run_id, seen[-1].seq) == []
        assert [s.split()[0] for s in statements] == ["PRAGMA", "SELECT", "PRAGMA"]
        w.append(msg("new"))
        new = reader.tail(run_id, seen[-1].seq)
        assert [e.payload["text"] for e in new] == ["new"]
        reader.close()


@pytest.mark.parametrize("content", [b"", b"SQLite format 3\x00"])
def test_an_empty_file_becomes_a_store_but_a_torn_header_does_not(tmp_path, content):
    path = tmp_path / "x.db"
    path.write_bytes(content)
    if content:
        with pytest.raises(NotAStore):
            EventStore.open(path)
        assert path.read_bytes() == content
    else:
        EventStore.open(path).close()
        assert path.stat().st_size > 0


def test_a_newer_schema_or_a_foreign_database_is_refused_untouched(tmp_path):
    newer = tmp_path / "newer.db"
    conn = sqlite3.connect(newer)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = newer.read_bytes()
    with pytest.raises(NewerSchema, match="upgrade npu-deploy"):
        EventStore.open(newer)
    with pytest.raises(NewerSchema):
        EventStore.open(newer, readonly=True)
    assert newer.read_bytes() == before
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE customers (id)")
    conn.commit()
    conn.close()
    before = foreign.read_bytes()
    with pytest.raises(NotAStore, match="not an npu-deploy store"):
        EventStore.open(foreign)
    assert foreign.read_bytes() == before


# --- properties --------------------------------------------------------------

HASHED_COLUMNS = ["event_id", "run_id", "run_version", "type", "schema_version", "phase",
                  "attempt", "actor", "ts", "causation_id", "correlation_id",
                  "idempotency_key", "payload", "prev_hash", "hash"]


def _write_run(path: Path, news: list[NewEvent]) -> str:
    with EventStore.open(path) as s, \
            s.create_run({**STARTED, "config": STORED_CONFIG}, run_id="prop") as w:
        for n in news:
            w.append(n)
        return w.run_id


def _flip(value, position: int, replacement: int):
    """`value` with one byte changed: a character of a text, a byte of an integer."""
    if value is None:
        return replacement % 7   # NULL -> a value is a change too
    if isinstance(value, int):
        data = bytearray(value.to_bytes(8, "big", signed=True))
        data[position % 8] ^= (replacement % 255) + 1
        return int.from_bytes(data, "big", signed=True)
    chars = list(value)
    i = position % len(chars)
    new = chr(32 + replacement % 95)   # printable ASCII, like everything we store
    assume(new != chars[i])
    chars[i] = new
    return "".join(chars)


@pytest.mark.slow         # several seconds: out of the fast core (make test-fast)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(news=stored_event_lists, data=st.data())
def test_any_single_changed_byte_in_any_stored_event_is_found_by_verify(news, data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.db"
        run_id = _write_run(path, news)
        version = data.draw(st.integers(1, len(news) + 1), label="event")
        column = data.draw(st.sampled_from(HASHED_COLUMNS), label="column")
        conn = raw(path)
        value = conn.execute(f"SELECT {column} FROM events WHERE run_version = ?",
                             (version,)).fetchone()[0]
        changed = _flip(value, data.draw(st.integers(0, 10_000)), data.draw(st.integers(0, 10_000)))
        conn.execute("DROP TRIGGER events_append_only_update")
        try:
            conn.execute(f"UPDATE events SET {column} = ? WHERE run_version = ? AND run_id = ?",
                         (changed, version, run_id))
        except sqlite3.IntegrityError:
            assume(False)  # the edit collides with a unique key: SQLite refused it already
        conn.close()
        with EventStore.open(path, readonly=True) as s:
            report = s.verify(run_id)
        assert not report.ok, (column, version)
        if column not in ("run_version", "run_id"):
            assert report.bad_version == version and f"v{version}" in report.problem


def test_seq_is_the_storage_position_and_reordering_it_is_found(store, db_path):
    with store.create_run(STARTED) as w:
        w.append_batch([msg("a"), msg("b")])
    conn = raw(db_path)
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute("UPDATE events SET seq = 100 WHERE run_version = 2")
    report = store.verify(w.run_id)
    assert not report.ok and report.bad_version == 3 and "reordered" in report.problem


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(news=stored_event_lists, blob=st.binary(min_size=1, max_size=2000))
def test_export_then_import_reproduces_the_run_with_its_chain_and_blobs(news, blob):
    with tempfile.TemporaryDirectory() as tmp:
        src_path, dst_path, file = (Path(tmp) / n for n in ("a.db", "b.db", "run.jsonl"))
        with EventStore.open(src_path) as src:
            ref = src.put_blob(blob)
            with src.create_run({**STARTED, "config": STORED_CONFIG}) as w:
                for n in news:
                    w.append(n)
                w.append(NewEvent("run.finished", {"verdict": "PASS", "summary": "ok",
                                                   "report": ref}))
            run_id = w.run_id
            header = export_run(src, run_id, file)
            original = [e.row() for e in src.events(run_id)]
            state = src.fold(run_id, use_snapshots=False)
        assert header["blobs"] == 1
        with EventStore.open(dst_path) as dst:
            result = import_run(dst, file)
            assert not result.already_present and result.events == len(news) + 2
            copied = [e.row() for e in dst.events(run_id)]
            assert [{**r, "seq": None} for r in copied] == [{**r, "seq": None} for r in original]
            assert dst.verify(run_id).ok
            assert dst.fold(run_id) == state
            assert dst.get_blob(ref) == blob
            assert import_run(dst, file).already_present


def test_export_files_carry_payloads_as_stored(store, tmp_path):
    with store.create_run(STARTED) as w:
        w.append(msg("hello"))
    out = tmp_path / "run.jsonl"
    export_run(store, w.run_id, out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["format"] == "npu-deploy-run" and lines[0]["events"] == 2
    assert lines[2]["event"]["payload"] == {"role": "assistant", "text": "hello"}


def test_a_store_migrates_forward_once_and_keeps_its_runs(db_path, monkeypatch):
    from npu_deploy.store import schema

    with EventStore.open(db_path) as s, s.create_run(STARTED) as w:
        w.append(msg("before the migration"))
        run_id, head = w.run_id, w.state.last_hash

    def v2(db):   # a later schema adds a column; old rows keep their bytes
        db.conn.execute("ALTER TABLE runs ADD COLUMN note TEXT")

    later = schema.SCHEMA_VERSION + 1
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, v2])
    monkeypatch.setattr(schema, "SCHEMA_VERSION", later)
    with pytest.raises(Exception, match=f"schema {later - 1}; run any writing command"):
        EventStore.open(db_path, readonly=True)   # readers never migrate
    with EventStore.open(db_path) as s:
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == later
        report = s.verify(run_id)
        assert report.ok and report.head_hash == head
        assert "note" in {c.name for c in s.db.table("runs").columns}
    with EventStore.open(db_path) as s:   # a second open finds nothing to do
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == later


def test_the_run_listing_follows_the_folded_state(store):
    with store.create_run(STARTED) as w:
        w.append(NewEvent("phase.entered", {"name": "kernel validation"}, phase=1, attempt=1))
        w.append(NewEvent("tool.requested", {"call_id": "1", "tool": "compile"}, actor="agent"))
        w.append(NewEvent("model.called", {"model": "claude", "input_tokens": 1200,
                                           "output_tokens": 300, "cost_usd": 0.25,
                                           "stop_reason": "end_turn", "duration_s": 2.0},
                          actor="agent", phase=1, attempt=1))
        w.append(msg("thinking"))
        [summary] = store.runs()
        assert (summary.status, summary.phase_reached, summary.events) == ("running", 1, 5)
        assert (summary.input_tokens, summary.output_tokens, summary.cost_usd) == (1200, 300, 0.25)
        assert summary.head_type == "agent.message"
        w.append(NewEvent("run.finished", {"verdict": "PASS", "summary": "all gates passed"}))
    [summary] = store.runs()
    assert (summary.status, summary.verdict, summary.events) == ("finished", "PASS", 6)
    assert store.fold(w.run_id) == w.state
