"""Negotiation on several ranks: calls of one name matched in call order, thousands in flight,
a new name per call with bounded state, names waiting for a late rank, automatic names
refused while stopped (tests/core/workers/negotiation_*.py)."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3])
def test_calls_of_one_name_are_matched_in_call_order(np_):
    run_ranks(np_, "negotiation_call_order.py", timeout=180)


def test_thousands_of_calls_of_one_name_in_flight_and_at_shutdown():
    run_ranks(2, "negotiation_call_order_many.py", timeout=180)


def test_a_new_name_per_call_keeps_bounded_state():
    run_ranks(2, "negotiation_many_names.py", timeout=240)


def test_many_names_waiting_for_a_late_rank_complete_in_linear_time():
    run_ranks(2, "negotiation_many_pending.py", timeout=240)


@pytest.mark.parametrize("np_", [2, 3])
def test_unnamed_calls_refused_while_stopped_take_no_number(np_):
    # Refused before init() / after shutdown() on some ranks only; the stall shutdown turns
    # a mismatch of automatic names into an error, not a hang.
    run_ranks(np_, "negotiation_unnamed_while_stopped.py", timeout=180,
              env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "3",
                   "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "6"})
