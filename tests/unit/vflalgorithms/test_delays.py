"""The delay injector reproduces the thesis's round-robin and random delay scenarios."""

from __future__ import annotations

from vflalgorithms.delays import Delay
from vflcore.job.spec import JobSpec


def _job(**options: object) -> JobSpec:
    return JobSpec("j", algorithm="async", passive_parties=(2, 3), algorithm_options=dict(options))


def test_round_robin_sleeps_only_in_the_partys_own_slot() -> None:
    """Slots of 0.2 s alternate between parties 2 and 3; a party sleeps to the end of its own slot."""
    slept: list[float] = []
    now = [0.05]  # slot 0: party 2's
    two = Delay(_job(delay="round_robin", delay_s=0.2), 2, clock=lambda: now[0], sleep=slept.append)
    three = Delay(_job(delay="round_robin", delay_s=0.2), 3, clock=lambda: now[0], sleep=slept.append)
    assert round(two.before_step(), 6) == 0.15 and three.before_step() == 0.0
    now[0] = 0.25  # slot 1: party 3's
    assert two.before_step() == 0.0 and round(three.before_step(), 6) == 0.15
    assert [round(s, 6) for s in slept] == [0.15, 0.15]


def test_random_delay_follows_its_probability_and_is_reproducible() -> None:
    def run() -> list[float]:
        delay = Delay(_job(delay="random", delay_s=1.0, delay_probability=0.25), 2, sleep=lambda s: None)
        return [delay.before_step() for _ in range(2000)]

    first = run()
    assert first == run()
    assert 0.2 < sum(first) / len(first) < 0.3


def test_no_delay_by_default() -> None:
    assert Delay(JobSpec("j"), 2, sleep=lambda s: None).before_step() == 0.0


def test_one_delayed_party_sleeps_every_step_and_the_others_never() -> None:
    slept: list[float] = []
    job = _job(delay="round_robin", delay_s=0.2, delayed_parties=[3])
    assert Delay(job, 2, clock=lambda: 0.05, sleep=slept.append).before_step() == 0.0
    assert round(Delay(job, 3, clock=lambda: 0.05, sleep=slept.append).before_step(), 6) == 0.15
    assert round(Delay(job, 3, clock=lambda: 0.25, sleep=slept.append).before_step(), 6) == 0.15
