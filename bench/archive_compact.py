"""Issue 13's measure: `nsq archive compact` (PySpark) beside DuckDB running the same job on
the same files, in one run.

The input (made once, then cached under the temp dir in a folder named by --messages and
--files): envelope lines exactly as `nsq_to_file --format json --gzip` writes them
(nsqtools.formats.json_lines), gzip level 6 as Go's default, in files named as its
defaults name them (<TOPIC>.<HOST><REV>.<DATETIME>.log.gz). Three topics of JSON event
bodies of about 180 bytes, timestamps over six hours across a UTC midnight; 0.5% of the
bodies are not UTF-8 (base64 in the envelope), 0.2% hold newlines (pretty-printed), and
1% of the lines are duplicates, as a requeue or a crash leaves them: a message of an
earlier file of its topic again, same id and timestamp, one more attempt.

The job: envelopes in; body as bytes (base64 decoded where the envelope says so); date
(yyyy-MM-dd) and hour of the UTC timestamp; one row per (topic, id, timestamp_ns), the
one with the fewest attempts; Parquet partitioned by topic, date and hour. DuckDB runs
it in this process with 2 threads and is timed from the query's start to its end. Ours
runs as a whole process (`nsq archive compact ... --json`, from this checkout) with
Spark's event log on, and reports its own seconds: "session" (SparkSession start) and
"job" (everything after), maybe more. Each round runs DuckDB, ours on local[2] and ours
on local[1], and every output must hold the rows the generator made, per (topic, date,
hour): checked by reading the Parquet back with DuckDB. Printed: every run, the medians,
ours/duckdb (target at most 3), the session start (target under 5 s), the scaling from
local[1] to local[2], and the stages of the median local[2] run from its event log.

    .venv/bin/python bench/archive_compact.py [--messages N] [--files F] [--runs R]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing import Pool
from pathlib import Path
from types import MappingProxyType
from typing import Any

import duckdb

from nsqtools.formats import Origin, json_lines
from nsqtools.protocol import Message

CHECKOUT = Path(__file__).resolve().parent.parent
OURS = [sys.executable, "-c", "from nsqtools.entry import nsq; nsq()", "archive", "compact"]
GENERATOR_VERSION = 1  # in the cache folder's name: bump it when the data changes
TOPICS = ("orders", "clicks", "payments")
HOST = "benchhost"  # <HOST> in the file names: where nsq_to_file ran
NSQD = "nsqd-1.internal:4150"  # the envelope's nsqd
CHANNEL = "archive"
START_NS = int(datetime(2026, 11, 23, 21, 0, tzinfo=UTC).timestamp()) * 10**9
SPAN_NS = 6 * 3600 * 10**9
HOUR_NS = 3600 * 10**9
GUID_EPOCH_MS = 1288834974657  # nsqd's guid factory counts milliseconds from here
DUPLICATE_SHARE = 0.01
BINARY_PER_MILLE = 5
MULTILINE_PER_MILLE = 2
RETRIED_PERCENT = 2  # messages nsqd had delivered once already when archived
GZIP_LEVEL = 6  # nsq_to_file's --gzip-level default
CHUNK = 10_000  # messages formatted and written at a time
MASK64 = (1 << 64) - 1
TIME_LIMIT = 1800.0  # seconds for one run of ours: more is stuck, not slow
# Spark operators that say nothing of what a stage does, left out of its description
PLUMBING = ("WholeStageCodegen", "CollectMetrics", "MapPartitionsRDD")

Partition = tuple[str, str, int]  # topic, date, hour


# ---------------------------------------------------------------------------------------
# The input


@dataclass(frozen=True)
class ArchiveFile:
    """One file of the input: its messages are the topic's `first` to `first + fresh - 1`
    (in time order) and `duplicates` more drawn from those of the topic's earlier files."""

    name: str
    topic: int  # index into TOPICS
    first: int
    fresh: int
    duplicates: int
    topic_total: int  # the topic's messages over all its files: sets their spacing


def mixed(key: int) -> int:
    """splitmix64: a well-spread 64-bit number for each key, cheap and deterministic."""
    value = (key + 0x9E3779B97F4A7C15) & MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
    return value ^ (value >> 31)


def timestamp_of(index: int, topic_total: int, noise: int) -> int:
    """The topic's messages evenly over the span, each a little after its slot's start."""
    slot = SPAN_NS // topic_total
    return START_NS + index * slot + noise % slot


def event(topic: int, index: int, noise: int, timestamp_ns: int) -> dict[str, object]:
    """A JSON event body of about 180 bytes, of the topic's kind."""
    at = datetime.fromtimestamp(timestamp_ns // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    customer = f"c-{noise % 900_000 + 100_000}"
    source = ("web", "ios-app", "android-app")[(noise >> 16) % 3]
    if TOPICS[topic] == "orders":
        return {
            "type": "order.placed",
            "order_id": f"o-{index:09d}",
            "customer": customer,
            "sku": f"SKU-{noise >> 20 & 0xFFFF:05d}",
            "quantity": noise >> 36 & 7 or 1,
            "price_cents": noise >> 40 & 0x3FFF,
            "currency": ("EUR", "USD", "SEK")[noise % 3],
            "source": source,
            "at": at,
        }
    if TOPICS[topic] == "clicks":
        return {
            "type": "page.view",
            "session": f"{noise:016x}",
            "customer": customer,
            "path": f"/products/{noise >> 24 & 0xFFFF}?ref={('home', 'search', 'mail')[noise % 3]}",
            "viewport": ("1440x900", "390x844", "1920x1080")[(noise >> 8) % 3],
            "source": source,
            "at": at,
        }
    return {
        "type": "payment.captured",
        "payment_id": f"pay_{noise >> 8:x}"[:20],
        "order_id": f"o-{index:09d}",
        "amount_cents": noise >> 30 & 0xFFFFF,
        "method": ("card", "sepa", "swish")[noise % 3],
        "last4": f"{noise >> 12 & 0x1FFF:04d}",
        "source": source,
        "at": at,
    }


def body_of(topic: int, index: int, noise: int, timestamp_ns: int) -> bytes:
    """Mostly compact JSON; some pretty-printed (newlines), some from a Latin-1 producer
    (not UTF-8: the envelope carries them in base64)."""
    fields = event(topic, index, noise, timestamp_ns)
    kind = mixed(noise) % 1000  # not tied to any field drawn from the noise
    if kind < BINARY_PER_MILLE:
        fields["city"] = "Malmö"
        return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("latin-1")
    if kind < BINARY_PER_MILLE + MULTILINE_PER_MILLE:
        return json.dumps(fields, indent=1).encode()
    return json.dumps(fields, separators=(",", ":")).encode()


def noise_of(topic: int, index: int) -> int:
    return mixed(topic << 40 | index)


def message_of(topic: int, index: int, topic_total: int) -> Message:
    """The topic's message number `index`, the same every time it is asked for. Its id is
    nsqd's kind: milliseconds since nsqd's epoch, then a sequence number."""
    noise = noise_of(topic, index)
    timestamp_ns = timestamp_of(index, topic_total, noise)
    guid = (timestamp_ns // 1_000_000 - GUID_EPOCH_MS) << 22 | index & 0x3FFFFF
    attempts = 2 if mixed(noise) % 100 < RETRIED_PERCENT else 1
    body = body_of(topic, index, noise, timestamp_ns)
    return Message(f"{guid:016x}".encode(), timestamp_ns, attempts, body)


def messages_in(plan: ArchiveFile) -> Iterator[Message]:
    """The file's messages in the order written: its own, with the duplicates of earlier
    files' messages between them (a requeued message comes back later, one attempt more)."""
    chooser = random.Random(plan.name)
    places = Counter(chooser.randrange(plan.fresh + 1) for _ in range(plan.duplicates))
    for offset in range(plan.fresh + 1):
        for _ in range(places[offset]):
            earlier = message_of(plan.topic, chooser.randrange(plan.first), plan.topic_total)
            earlier.attempts += 1
            yield earlier
        if offset < plan.fresh:
            yield message_of(plan.topic, plan.first + offset, plan.topic_total)


def write_archive(job: tuple[ArchiveFile, Path]) -> Counter[Partition]:
    """Writes one file; returns its fresh messages counted by (topic, date, hour)."""
    plan, folder = job
    origin = Origin(TOPICS[plan.topic], CHANNEL, NSQD)
    counts: Counter[int] = Counter()  # by hours since the epoch
    with gzip.open(folder / plan.name, "wb", compresslevel=GZIP_LEVEL) as archive:
        batch: list[Message] = []
        for message in messages_in(plan):
            batch.append(message)
            if len(batch) == CHUNK:
                archive.write(json_lines(batch, origin))
                batch.clear()
        archive.write(json_lines(batch, origin))
    for index in range(plan.first, plan.first + plan.fresh):
        counts[timestamp_of(index, plan.topic_total, noise_of(plan.topic, index)) // HOUR_NS] += 1
    return Counter({partition_of(plan.topic, hour): count for hour, count in counts.items()})


def partition_of(topic: int, epoch_hour: int) -> Partition:
    moment = datetime.fromtimestamp(epoch_hour * 3600, UTC)
    return TOPICS[topic], f"{moment:%Y-%m-%d}", moment.hour


def planned(messages: int, files: int) -> list[ArchiveFile]:
    """`files` files of `messages` lines in all, round-robin over the topics, each topic's
    time span cut in order among its files; the duplicates go to files that have an
    earlier one of their topic."""
    topics = min(len(TOPICS), files)
    lines = [messages // files + (number < messages % files) for number in range(files)]
    later = [number for number in range(files) if number >= topics]
    duplicates = dict.fromkeys(later, 0)
    for turn in range(round(messages * DUPLICATE_SHARE) if later else 0):
        duplicates[later[turn % len(later)]] += 1
    fresh = [lines[number] - duplicates.get(number, 0) for number in range(files)]
    totals = [sum(fresh[topic::topics]) for topic in range(topics)]
    plans, firsts, revisions = [], [0] * topics, Counter[str]()
    for number in range(files):
        topic = number % topics
        first, firsts[topic] = firsts[topic], firsts[topic] + fresh[number]
        start = datetime.fromtimestamp(timestamp_of(first, totals[topic], 0) // 10**9, UTC)
        stem = f"{TOPICS[topic]}.{HOST}<REV>.{start:%Y-%m-%d_%H}.log.gz"
        name = stem.replace("<REV>", f"-{revisions[stem]:06d}")
        revisions[stem] += 1
        plans.append(
            ArchiveFile(name, topic, first, fresh[number], duplicates.get(number, 0), totals[topic])
        )
    return plans


@dataclass(frozen=True)
class Corpus:
    """The input files and what a correct compaction of them holds."""

    paths: list[Path]
    lines: int
    expected: Counter[Partition]  # rows per (topic, date, hour)


def corpus(messages: int, files: int) -> Corpus:
    """The input, made now (on 2 processes) unless an earlier run left it in the cache."""
    folder = Path(tempfile.gettempdir()) / (
        f"nsqtools-bench-archive-v{GENERATOR_VERSION}-{messages}x{files}"
    )
    if not (folder / "expected.json").exists():
        generate(folder, messages, files)
    rows = json.loads((folder / "expected.json").read_text())
    expected = Counter({(topic, date, hour): count for topic, date, hour, count in rows})
    return Corpus(sorted(folder.glob("*.log.gz")), messages, expected)


def generate(folder: Path, messages: int, files: int) -> None:
    """Writes the files to a fresh folder beside, then renames it: a cut run leaves none."""
    started = time.perf_counter()
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    expected: Counter[Partition] = Counter()
    with Pool(2) as pool:
        for counts in pool.imap_unordered(
            write_archive, [(plan, partial) for plan in planned(messages, files)]
        ):
            expected.update(counts)
    rows = [[*partition, count] for partition, count in sorted(expected.items())]
    (partial / "expected.json").write_text(json.dumps(rows))
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    size = sum(path.stat().st_size for path in folder.glob("*.log.gz"))
    print(
        f"made {messages:,} lines in {files} files ({size / 2**20:.0f} MiB) in {folder}"
        f" in {time.perf_counter() - started:.1f} s",
        flush=True,
    )


# ---------------------------------------------------------------------------------------
# The contenders


def quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


DUCKDB_JOB = """
COPY (
    SELECT id, timestamp_ns, moment AS timestamp, attempts, topic, channel, nsqd,
        CASE encoding WHEN 'base64' THEN from_base64(body) ELSE encode(body) END AS body,
        strftime(moment, '%Y-%m-%d') AS date, hour(moment) AS hour
    FROM (
        SELECT *, make_timestamp(timestamp_ns // 1000) AS moment
        FROM read_json([{files}], format = 'newline_delimited', columns = {{
            id: 'VARCHAR', timestamp_ns: 'BIGINT', attempts: 'INTEGER', topic: 'VARCHAR',
            channel: 'VARCHAR', nsqd: 'VARCHAR', body: 'VARCHAR', encoding: 'VARCHAR'
        }})
    )
    QUALIFY row_number() OVER (PARTITION BY topic, id, timestamp_ns ORDER BY attempts) = 1
) TO {out} (FORMAT parquet, PARTITION_BY (topic, date, hour))
"""


def run_duckdb(data: Corpus, out: Path) -> float:
    """Seconds DuckDB (2 threads, a fresh in-memory database) takes for the job."""
    files = ", ".join(quoted(str(path)) for path in data.paths)
    query = DUCKDB_JOB.format(files=files, out=quoted(str(out)))
    with duckdb.connect(config={"threads": 2}) as database:
        database.execute("SET enable_progress_bar = false")  # a session setting only
        started = time.perf_counter()
        database.execute(query)
        return time.perf_counter() - started


@dataclass(frozen=True)
class Stage:
    """One completed stage: wall seconds from submission to completion, its tasks, and the
    seconds its tasks ran (summed over the tasks, from their metrics)."""

    stage_id: int
    operators: str  # what it runs: its RDDs' operators in order, e.g. "Scan json > Exchange"
    tasks: int
    seconds: float
    task_seconds: float
    gc_seconds: float
    submitted_ms: int
    completed_ms: int


@dataclass(frozen=True)
class Spark:
    """One run of ours: the whole process's wall seconds, the seconds it reported (session,
    job and whatever stages it names), and its stages from Spark's event log."""

    wall: float
    seconds: dict[str, float]
    stages: list[Stage]


def run_ours(
    data: Corpus,
    out: Path | str,
    master: str,
    scratch: Path,
    conf: Mapping[str, str] = MappingProxyType({}),
    sources: Sequence[str] = (),
) -> Spark:
    """`nsq archive compact` as a whole process on `master` (with the extra confs), its
    event log in scratch; the input is data's files, or where `sources` has them."""
    events, log = scratch / "events", scratch / "stderr.log"
    events.mkdir()
    inputs = list(sources) or [str(path) for path in data.paths]
    argv = [*OURS, *inputs, "--out", str(out), f"--master={master}"]
    argv += [f"--conf={key}={value}" for key, value in conf.items()]
    argv += ["--json", "--conf", "spark.eventLog.enabled=true"]
    argv += ["--conf", f"spark.eventLog.dir={events}", "--conf", "spark.eventLog.compress=false"]
    argv += ["--conf", "spark.eventLog.rolling.enabled=false"]  # one plain JSON-lines file
    started = time.perf_counter()
    with log.open("wb") as stderr:
        done = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONPATH": str(CHECKOUT)},  # ours from this checkout
            timeout=TIME_LIMIT,
            check=False,
        )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"ours on {master}: exit status {done.returncode}; its stderr: {log}")
    summary = json.loads(done.stdout)
    (event_log,) = events.iterdir()
    return Spark(wall, dict(summary["seconds"]), stages_in(event_log))


def stages_in(event_log: Path) -> list[Stage]:
    """The completed stages of a Spark event log (JSON lines), with their tasks' run and
    GC times summed."""
    run_ms: Counter[int] = Counter()
    gc_ms: Counter[int] = Counter()
    completed = []
    with event_log.open() as lines:
        for line in lines:
            record = json.loads(line)
            if record["Event"] == "SparkListenerTaskEnd" and record.get("Task Metrics"):
                run_ms[record["Stage ID"]] += record["Task Metrics"]["Executor Run Time"]
                gc_ms[record["Stage ID"]] += record["Task Metrics"]["JVM GC Time"]
            elif record["Event"] == "SparkListenerStageCompleted":
                completed.append(record["Stage Info"])
    return [
        Stage(
            stage_id=info["Stage ID"],
            operators=operators_of(info),
            tasks=info["Number of Tasks"],
            seconds=(info["Completion Time"] - info["Submission Time"]) / 1000,
            task_seconds=run_ms[info["Stage ID"]] / 1000,
            gc_seconds=gc_ms[info["Stage ID"]] / 1000,
            submitted_ms=info["Submission Time"],
            completed_ms=info["Completion Time"],
        )
        for info in sorted(completed, key=lambda info: info["Submission Time"])
    ]


# ---------------------------------------------------------------------------------------
# Checking and reporting


def rows_in(out: Path) -> Counter[Partition]:
    """Rows per (topic, date, hour) of a Parquet folder partitioned hive-style."""
    query = f"""
        SELECT topic, CAST(date AS VARCHAR), CAST(hour AS INTEGER), count(*)
        FROM read_parquet({quoted(str(out / "**" / "*.parquet"))},
            hive_partitioning = true, hive_types_autocast = false)
        GROUP BY ALL
    """
    with duckdb.connect() as database:
        found = database.execute(query).fetchall()
    return Counter({(topic, date, hour): count for topic, date, hour, count in found})


def check(name: str, out: Path, data: Corpus) -> None:
    """Exits unless the output holds exactly the rows expected in every partition; then
    removes it."""
    found = rows_in(out)
    if found != data.expected:
        keys = found.keys() | data.expected.keys()
        wrong = sorted(key for key in keys if found[key] != data.expected[key])
        details = ", ".join(f"{key}: {found[key]} not {data.expected[key]}" for key in wrong[:5])
        sys.exit(f"{name}: wrong rows in {len(wrong)} partitions of {out}: {details}")
    shutil.rmtree(out)


@dataclass
class Results:
    duckdb: list[float]
    ours: dict[int, list[Spark]]  # by cores


CORES = (2, 1)


def measure(data: Corpus, runs: int, scratch: Path) -> Results:
    results = Results([], {cores: [] for cores in CORES})
    for run in range(1, runs + 1):
        out = scratch / f"duckdb-{run}"
        results.duckdb.append(run_duckdb(data, out))
        check(f"duckdb run {run}", out, data)
        print(f"run {run} duckdb: job {results.duckdb[-1]:.2f} s", flush=True)
        for cores in CORES:
            folder = scratch / f"ours-{cores}-{run}"
            folder.mkdir()
            spark = run_ours(data, folder / "out", f"local[{cores}]", folder)
            check(f"ours local[{cores}] run {run}", folder / "out", data)
            results.ours[cores].append(spark)
            reported = ", ".join(f"{key} {value:.2f} s" for key, value in spark.seconds.items())
            print(
                f"run {run} ours local[{cores}]: {reported}; process {spark.wall:.2f} s", flush=True
            )
    return results


def median_run(runs: list[Spark]) -> Spark:
    """The run whose job time is the median (the lower middle one of an even count)."""
    ordered = sorted(runs, key=lambda spark: spark.seconds["job"])
    return ordered[(len(ordered) - 1) // 2]


def table_row(label: str, values: list[float]) -> str:
    cells = "".join(f"{value:>8.2f}" for value in values)
    return f"{label:<28}{cells}{statistics.median(values):>10.2f}"


def summarise(results: Results, data: Corpus, runs: int) -> None:
    header = "".join(f"{f'run {run}':>8}" for run in range(1, runs + 1))
    print(f"\nseconds, {data.lines:,} lines, {sum(data.expected.values()):,} rows after dedup:")
    print(f"{'':<28}{header}{'median':>10}")
    print(table_row("duckdb job", results.duckdb))
    for cores in CORES:
        sparks = results.ours[cores]
        for key in sparks[0].seconds:
            print(table_row(f"ours local[{cores}] {key}", [spark.seconds[key] for spark in sparks]))
        print(table_row(f"ours local[{cores}] process", [spark.wall for spark in sparks]))
    # The ratios of each round too: the contenders of one round share its noise.
    two, one = results.ours[2], results.ours[1]
    ratio = [ours.seconds["job"] / duckdb for ours, duckdb in zip(two, results.duckdb, strict=True)]
    scaling = [
        slow.seconds["job"] / fast.seconds["job"] for slow, fast in zip(one, two, strict=True)
    ]
    print(table_row("ours local[2] / duckdb, job", ratio))
    print(table_row("local[1] / local[2], job", scaling))
    duckdb_job = statistics.median(results.duckdb)
    job = {
        cores: statistics.median(s.seconds["job"] for s in results.ours[cores]) for cores in CORES
    }
    session = statistics.median(spark.seconds["session"] for spark in results.ours[2])
    print(f"\nours local[2] / duckdb, job medians: {job[2] / duckdb_job:.2f}x (target at most 3x)")
    print(f"SparkSession start, local[2]: {session:.2f} s (target under 5 s)")
    print(f"scaling, job local[1] / local[2]: {job[1] / job[2]:.2f}x (2.00 would be linear)")
    for cores in CORES:
        print_stages(cores, median_run(results.ours[cores]))


def operators_of(info: dict[str, Any]) -> str:
    """A stage's RDDs' operators in the order they run (a stage's name is only the call
    that started its job, the same for all of them), consecutive repeats once."""
    named: list[str] = []
    for rdd in sorted(info["RDD Info"], key=lambda rdd: rdd["RDD ID"]):
        name = json.loads(rdd["Scope"])["name"].strip() if rdd.get("Scope") else rdd["Name"]
        if not name.startswith(PLUMBING) and name not in named[-1:]:
            named.append(name)
    return " > ".join(named) or info["Stage Name"]


def print_stages(cores: int, spark: Spark) -> None:
    """The stages of one run, and how much of its job they cover (the rest is the driver:
    planning, listing files, committing the output)."""
    print(f"\nstages of the median local[{cores}] run (job {spark.seconds['job']:.2f} s):")
    print(f"{'stage':>5} {'tasks':>6} {'wall s':>7} {'task s':>7} {'gc s':>6}  operators")
    for stage in spark.stages:
        print(
            f"{stage.stage_id:>5} {stage.tasks:>6} {stage.seconds:>7.2f}"
            f" {stage.task_seconds:>7.2f} {stage.gc_seconds:>6.2f}  {stage.operators}"
        )
    print(f"stages cover {covered(spark.stages):.2f} s of the job (overlaps counted once)")


def covered(stages: list[Stage]) -> float:
    """Seconds within at least one stage."""
    total, reach = 0, 0
    for stage in sorted(stages, key=lambda stage: stage.submitted_ms):
        start = max(stage.submitted_ms, reach)
        total += max(0, stage.completed_ms - start)
        reach = max(reach, stage.completed_ms)
    return total / 1000


def parsed_corpus(description: str, messages: int = 2_000_000) -> tuple[Corpus, int]:
    """The input the command line asks for (--messages, --files), and --runs: the
    options of every benchmark over these files."""
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--messages", type=int, default=messages, help="envelope lines in all")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()}", flush=True)
    return corpus(args.messages, args.files), args.runs


def main() -> None:
    data, runs = parsed_corpus(__doc__ or "")
    with tempfile.TemporaryDirectory(prefix="nsqtools-bench-") as tmp:
        results = measure(data, runs, Path(tmp))
    summarise(results, data, runs)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
