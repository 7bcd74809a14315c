"""Archives of topics on disk: what nsq_to_file writes, and reads back after a crash.

Between the commands and the runtime: the commands parse flags and build settings; the
archive sink (a runtime Sink) writes each topic's messages to files and settles them
only once the file holding them is synced. It owns:

- run.py: nsq_to_file's run: recovery first, a TopicArchive per topic fed by the
  runtime's consumers, every archive closed at the end, even after a failure;
- names.py: the filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV>) and the
  rule that no name leaves the output (or work) directory;
- timelayout.py: Go's time layouts both ways, for <DATETIME> (Go's strftime) and its
  reading back;
- nameparsing.py: names read back: topic, host, revision and datetime from a file's name;
- recovery.py: files a crash left behind, cut back to their last complete record or
  gzip member;
- placing.py: moving a finished file into the output directory without ever
  overwriting, across filesystems too.
"""
