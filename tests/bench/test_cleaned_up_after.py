"""A bench's clean-up runs however its run ends (pure: signals sent to this process)."""

import os
import signal

import pytest

from bench.isolation import cleaned_up_after


def test_a_kill_stops_the_run_but_not_its_clean_up():
    done = []

    def cleanup():
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C, while cleaning up
        done.append("cleaned")

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), cleaned_up_after(cleanup):
        os.kill(os.getpid(), signal.SIGTERM)
        done.append("ran on")  # never reached: the kill stops the run here
    assert done == ["cleaned"]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_run_that_ends_well_is_cleaned_up_too():
    done = []
    with cleaned_up_after(lambda: done.append("cleaned")):
        done.append("ran")
    assert done == ["ran", "cleaned"]
