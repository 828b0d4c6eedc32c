"""The request state machine: every legal and every illegal move."""

import itertools

import pytest

from core.errors import InvalidTransition
from tenants.models import CapacityRequest, Tenant

S = CapacityRequest.State
LEGAL = {
    ("approve", S.SUBMITTED): S.APPROVED,
    ("reject", S.SUBMITTED): S.REJECTED,
    ("cancel", S.SUBMITTED): S.CANCELLED,
    ("cancel", S.APPROVED): S.CANCELLED,
    ("cancel", S.PROVISIONED): S.CANCELLED,
    ("provision", S.APPROVED): S.PROVISIONED,
    ("expire", S.APPROVED): S.EXPIRED,
    ("expire", S.PROVISIONED): S.EXPIRED,
}
ALL_MOVES = list(itertools.product(CapacityRequest.TRANSITIONS, S.values))


@pytest.mark.parametrize(("action", "state"), ALL_MOVES)
def test_every_move(action, state):
    request = CapacityRequest(state=state)
    if (action, state) in LEGAL:
        assert request.can(action)
        request.transition(action)
        assert request.state == LEGAL[(action, state)]
    else:
        assert not request.can(action)
        with pytest.raises(InvalidTransition, match=f"cannot {action}"):
            request.transition(action)
        assert request.state == state


def test_final_states_allow_nothing():
    for state in (S.REJECTED, S.CANCELLED, S.EXPIRED):
        assert not any(CapacityRequest(state=state).can(a) for a in CapacityRequest.TRANSITIONS)


@pytest.mark.parametrize(
    ("action", "start", "end"),
    [
        ("suspend", "active", "suspended"),
        ("resume", "suspended", "active"),
        ("archive", "active", "archived"),
        ("archive", "suspended", "archived"),
    ],
)
def test_tenant_moves(action, start, end):
    tenant = Tenant(status=start)
    tenant.transition(action)
    assert tenant.status == end


@pytest.mark.parametrize(
    ("action", "start"),
    [
        ("suspend", "suspended"),
        ("suspend", "archived"),
        ("resume", "active"),
        ("resume", "archived"),
        ("archive", "archived"),
    ],
)
def test_illegal_tenant_moves(action, start):
    with pytest.raises(InvalidTransition):
        Tenant(status=start).transition(action)
