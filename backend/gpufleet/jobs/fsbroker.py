"""kombu's filesystem transport, with messages that appear whole or not at all.

The stock transport creates a message file under its final name, then locks
and writes it. The consumer does not take the lock: it renames the file away
and reads it, so it can read the file between its creation and its write,
find it empty, and die on the JSON error ("Unrecoverable error:
JSONDecodeError"), with the message gone. Seen under load with the embedded
worker: every later training then sat `scheduled`.

Here a message is written (and flushed to disk) under a name the consumer
does not match, then renamed into place, which is atomic within a folder.
A message that cannot be read anyway (a disk that filled up under an older
version) is logged and skipped rather than stopping the worker: the
scheduler sends a training that nobody claims again (jobs/recovery.py).
"""

from __future__ import annotations

import logging
import os
import uuid
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps

log = logging.getLogger(__name__)


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # A leading dot: the consumer only takes names ending in ".<queue>.msg".
        partial = os.path.join(self.data_folder_out, f".{uuid.uuid4().hex}.partial")
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, dumps(payload).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(partial, final)
        except OSError as exc:
            try:
                os.unlink(partial)
            except OSError:
                pass
            raise ChannelError(f"cannot add a message to {self.data_folder_out!r}: {exc}") from exc

    def _get(self, queue):
        try:
            return super()._get(queue)
        except ValueError as exc:
            log.error("skipped an unreadable message in %s (%s); a training nobody claims is sent again",
                      self.data_folder_in, exc)
            raise Empty() from exc


class Transport(filesystem.Transport):
    Channel = Channel
