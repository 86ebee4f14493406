"""Progress bars in a training's log: the copier's cuts at carriage returns, and the readers' collapse."""

from __future__ import annotations

from gpufleet.engine.logtext import LineSplitter, collapse_cr


def test_redraws_are_cut_at_carriage_returns_and_throttled():
    split = LineSplitter(redraw_every_s=3600)
    # The newest complete redraw is due at once; later ones wait for their second (here: never).
    assert split.feed(b"start\n 10%|#  |\r 20%|## |\r 30%|###|") == [b"start\n", b" 20%|## |\r\n"]
    assert split.feed(b"\r") == []  # a lone \r at the end may be half of \r\n: wait for more
    assert split.feed(b" 40%|####|\r") == []
    assert split.due(force=True) == [b" 30%|###|\r\n"]
    # \r\n is an ordinary line end, in one chunk or across two.
    assert split.feed(b"done\r") == [] and split.feed(b"\nnext\r\n") == [b"done\n", b"next\n"]
    # A newline-terminated line supersedes the pending redraw; the end flushes what is left.
    split.feed(b" 50%\r")
    assert split.feed(b"epoch 1 finished\n") == [b"epoch 1 finished\n"]
    split.feed(b" 60%\r 70%")
    assert split.close() == [b" 70%\n"]


def test_collapse_keeps_the_newest_redraw_of_each_rank_and_every_ordinary_line():
    text = ("[rank 0] start\n[rank 0] 10%\r\n[rank 1] 5%\r\n[rank 0] 20%\r\n[rank 1] loss 0.5\n"
            "[rank 0] 30%\r\n[gpufleet] a note\n")
    assert collapse_cr(text) == ("[rank 0] start\n[rank 1] loss 0.5\n[rank 0] 30%\r\n[gpufleet] a note\n")
    # Without a redraw nothing changes.
    plain = "[rank 0] a\n[rank 1] b\n"
    assert collapse_cr(plain) == plain
