"""`nsq archive` as a script, for spark-submit, which runs a Python file:

    spark-submit --master spark://host:7077 "$(nsq archive --script)" compact SRC --out DIR

The job then runs on spark-submit's session (its --master and --conf).
"""

from nsqtools.commands.archive import command
from nsqtools.commands.front import run

if __name__ == "__main__":
    run(command, "nsq archive")
