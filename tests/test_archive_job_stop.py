"""nsq archive's stop signal against a running Spark job (commands/archive/jobs.py): the
job's Spark jobs cancelled from a thread, and never a cancel sent to a session that has
ended. The fault harness found the second as a traceback: a SIGTERM as replay's job
ended started a cancel that ran after the session's stop, and PySpark raised in that
thread (`'NoneType' object has no attribute 'sc'`: a stopped SparkContext has no JVM
side). The order of a signal, a thread and a stop cannot be forced from outside a real
process, so the session here is a stand-in that counts the cancels it is sent.
"""

from __future__ import annotations

from nsqtools.commands.archive.jobs import _JobStop
from nsqtools.testing import wait_until


class CountingContext:
    def __init__(self) -> None:
        self.cancels = 0

    def cancelAllJobs(self) -> None:  # PySpark's name
        self.cancels += 1


class StandInSession:
    """What cancel_jobs uses of a classic SparkSession."""

    def __init__(self) -> None:
        self.sparkContext = CountingContext()  # PySpark's name


def test_a_stop_during_the_job_cancels_its_spark_jobs() -> None:
    session = StandInSession()
    stop = _JobStop()
    stop.spark = session  # type: ignore[assignment]
    stop.now()
    wait_until(lambda: session.sparkContext.cancels == 1, 10, "the cancel")
    assert stop.stopped


def test_a_stop_after_the_job_ended_cancels_nothing() -> None:
    session = StandInSession()
    stop = _JobStop()
    stop.spark = session  # type: ignore[assignment]
    stop.forget_session()
    stop.now()  # no session left: no thread started
    assert stop.stopped
    assert session.sparkContext.cancels == 0


def test_a_cancel_that_runs_after_the_session_ended_does_nothing() -> None:
    """The race itself: the signal started the cancelling thread during the job, and
    the thread runs only once the job ended and the session was let go."""
    session = StandInSession()
    stop = _JobStop()
    stop.spark = session  # type: ignore[assignment]
    stop.forget_session()
    stop._cancel()  # the thread's work, run late
    assert session.sparkContext.cancels == 0
