"""GroupCollector (cluster/group_collector.py), Ray-free: a rollout feed stand-in finishes requests in an order
the test chooses, writing real records to a real replay store. With ``in_request_order`` (``train.replayable``)
every step trains on the same groups whatever order they finished in; without it a step takes the groups
that arrived first."""

import random

import pytest

from cluster.group_collector import GroupCollector
from cluster.pending_groups import PendingGroup, PendingGroups, carried_over
from conductor.replay_store import Cursor, ReplayStore
from conductor.rollout import RolloutReceipt, RolloutRequest
from conductor.rollout_record import RolloutRecord
from conductor.staleness import StalenessManager
from conductor.tasks.splits import TaskSampler, training_sampler
from conductor.tasks.task import Task

TASKS = [Task(id=f"t{i}", domain="math", prompt=f"question {i}", answer="1", verifier="exact")
         for i in range(40)]
GROUP_SIZE = 2


class OrderedFeed:
    """Finishes one in-flight request per poll, picked by ``pick`` (0: the oldest); a request's groups are
    sampled at the version published when it was submitted. ``unwritten``: batch ids that come back having
    written nothing; ``fail``: batch ids given up; ``orphaned``: batch ids given up whose groups are written
    anyway (an actor that was slow, not dead)."""

    def __init__(self, store: ReplayStore, staleness: StalenessManager, pick, unwritten=(), fail=(), orphaned=(),
                 base: int = 0):
        self.actors = [object()]
        self.base = base  # the version before this segment's first publish (a resumed segment's is above the store's)
        self.submitted: list[RolloutRequest] = []
        self.store, self.staleness, self.pick = store, staleness, pick
        self.unwritten, self.fail, self.orphaned = set(unwritten), set(fail), set(orphaned)
        self.in_flight: list[tuple[RolloutRequest, int]] = []
        self.given_up: list[RolloutRequest] = []
        self.came_back: set[str] = set()
        self.unstored: set[str] = set()
        self.counters = type("Counters", (), {"given_up": 0})()

    @property
    def busy(self) -> bool:
        return bool(self.in_flight)

    def submit(self, request: RolloutRequest) -> None:
        self.submitted.append(request)
        self.in_flight.append((request, self.base + self.staleness.published))

    def poll(self, timeout_s: float) -> list[RolloutReceipt]:
        if not self.in_flight:
            return []
        request, version = self.in_flight.pop(self.pick(len(self.in_flight)))
        if request.batch_id in self.fail:
            self.given_up.append(request)
            return []
        if request.batch_id in self.orphaned:
            self.given_up.append(request)
        if request.batch_id not in self.unwritten:
            self.store.write([
                RolloutRecord(rollout_id=f"{group_id}-s{s}", group_id=group_id, question_id=task.id,
                              policy_version=version, prompt_token_ids=[1], completion_token_ids=[2],
                              completion_logprobs=[-0.1], completion_text="x", format_ok=True, correct=s == 0,
                              reward=float(s == 0))
                for group_id, task in zip(request.group_ids(), request.tasks) for s in range(GROUP_SIZE)])
        if request.batch_id in self.orphaned:
            return []
        self.came_back.add(request.batch_id)
        stored = () if request.batch_id in self.unwritten else request.group_ids()
        self.unstored.update(set(request.group_ids()) - set(stored))
        return [RolloutReceipt(request.batch_id, len(request.tasks), (version,), stored=stored)]

    def take_unstored(self, group_id) -> bool:
        if group_id in self.unstored:
            self.unstored.discard(group_id)
            return True
        return False

    def wait_sampled(self, timeout_s: float, on_wait=lambda: None) -> bool:
        self.waits = getattr(self, "waits", 0) + 1
        return False  # as if a request in flight had not drawn its completions in time

    def take_given_up(self) -> list[RolloutRequest]:
        given_up, self.given_up = self.given_up, []
        return given_up


def run(tmp_path, pick, *, in_request_order: bool, steps: int = 4, k: int = 1, unwritten=(), fail=(), orphaned=(),
        horizon: bool = False, between_steps=lambda feed: None, make_store=ReplayStore):
    """The question ids each step trains on, and the collector's counts. In request order, every admitted group
    is trained, still requested, or discarded (skipped, given up), and each step waited for the requests in
    flight to sample (the stand-in feed says they had not: counted). ``horizon``: the manager knows the steps;
    ``between_steps`` runs after each step's publish (a validation's polls)."""
    store = make_store(str(tmp_path / f"store-{random.random()}"))
    staleness = StalenessManager(groups_per_step=3, max_staleness=k, steps=steps if horizon else None)
    feed = OrderedFeed(store, staleness, pick, unwritten, fail, orphaned)
    counts: dict[str, int] = {}
    collector = GroupCollector(
        feed, store, TaskSampler(TASKS, seed=7), staleness, Cursor(), segment="seg", first_version=0,
        questions_per_batch=1, refill_rounds=0, filter_zero_spread=False, on_wait=lambda: None,
        count=lambda name, n: counts.__setitem__(name, counts.get(name, 0) + n), stall_timeout_s=60,
        in_request_order=in_request_order)
    trained = []
    for step in range(steps):
        groups = collector.collect(lambda version=step: version).groups
        assert all(len(group) == GROUP_SIZE for group in groups)
        trained.append([group[0].question_id for group in groups])
        staleness.publish()
        between_steps(feed)
    trained_groups = sum(len(step) for step in trained)
    in_flight = sum(len(request.tasks) for request, _ in feed.in_flight)
    if in_request_order:
        assert staleness.started - staleness.discarded == trained_groups + len(collector.requested)
        assert feed.unstored <= {group_id for _, group_id in collector.requested}  # nothing kept past its use
    else:
        assert staleness.started - staleness.discarded == trained_groups + len(collector.buffer) + in_flight
    assert getattr(feed, "waits", 0) == (steps if in_request_order else 0)
    assert counts.get("unsettled_publishes", 0) == getattr(feed, "waits", 0)
    return trained, counts


def oldest(n):
    return 0


def newest(n):
    return n - 1


@pytest.mark.parametrize("k", [0, 1, 2])
def test_in_request_order_every_step_trains_on_the_same_groups_whatever_finished_first(tmp_path, k):
    rng = random.Random(k)
    in_order, _ = run(tmp_path, oldest, in_request_order=True, k=k)
    assert run(tmp_path, newest, in_request_order=True, k=k)[0] == in_order
    assert run(tmp_path, lambda n: rng.randrange(n), in_request_order=True, k=k)[0] == in_order
    assert run(tmp_path, oldest, in_request_order=False, k=k)[0] == in_order  # finishing in order: the same


def test_without_it_an_async_step_takes_the_groups_that_came_back_first(tmp_path):
    in_order, _ = run(tmp_path, oldest, in_request_order=True, k=1)
    last_first, _ = run(tmp_path, newest, in_request_order=False, k=1)
    assert last_first[0] != in_order[0]


@pytest.mark.parametrize("in_request_order", [False, True])
def test_a_request_given_up_between_steps_frees_its_place_for_the_last_steps(tmp_path, in_request_order):
    """Knowing its steps, the collector admits nothing past the last, so in the last k steps only freeing a place
    given up outside a step (a validation's polls finish requests too) lets the step be collected: seg-5, the
    last step's, is given up then, and the step is collected with another question instead of stalling."""
    def validation_polls(feed):
        while feed.in_flight:
            feed.poll(timeout_s=0)

    trained, counts = run(tmp_path, oldest, in_request_order=in_request_order, steps=2, k=1, fail={"seg-5"},
                          horizon=True, between_steps=validation_polls)
    assert [len(step) for step in trained] == [3, 3] and counts["rollout_requests_failed"] == 1
    assert len(set(trained[0] + trained[1])) == 6  # seg-5's question is not trained; another is


def test_a_request_that_wrote_nothing_or_was_given_up_is_not_waited_for(tmp_path):
    """seg-2 comes back without records and seg-5 is given up: the steps go on with the next requests."""
    trained, counts = run(tmp_path, newest, in_request_order=True, unwritten={"seg-2"}, fail={"seg-5"})
    in_order, _ = run(tmp_path, oldest, in_request_order=True, steps=6)
    flat_expected = [q for step in in_order for q in step]
    skipped = {flat_expected[1], flat_expected[4]}  # the questions of requests 2 and 5 (one question each)
    assert [q for step in trained for q in step] == [q for q in flat_expected if q not in skipped][:12]
    assert counts.get("rollout_requests_failed") == 1


@pytest.mark.parametrize("in_request_order", [True, False])
def test_groups_written_after_their_request_was_given_up_are_not_trained_or_counted_twice(tmp_path, in_request_order):
    """seg-2's actor writes its group after the feed gave the request up: its place was freed once; the group
    is ignored when read, in either mode, and the admission count still adds up."""
    trained, counts = run(tmp_path, oldest, in_request_order=in_request_order, orphaned={"seg-2"})
    in_order, _ = run(tmp_path, oldest, in_request_order=True, steps=5)
    flat_expected = [q for step in in_order for q in step]
    assert [q for step in trained for q in step] == [q for q in flat_expected if q != flat_expected[1]][:12]
    assert counts.get("rollout_requests_failed") == 1 and counts.get("orphaned_groups_ignored") == 1


def test_a_learner_rebuilt_while_the_step_settles_leaves_no_group_below_the_new_floor(tmp_path):
    """In request order the collector waits for the requests in flight to sample; that wait looks after the
    actors, which can rebuild the learner and raise the floor. The groups already taken were then trained
    below it, two versions old at k = 1."""
    store = ReplayStore(str(tmp_path / "store"))
    staleness = StalenessManager(groups_per_step=2, max_staleness=1)
    version = {"now": 1, "rebuild": False}

    class Feed:
        actors, busy, came_back, counters = [object()], False, set(), type("C", (), {"given_up": 0})()
        def take_unstored(self, group_id):
            return False  # every request stores its groups

        def submit(self, request):
            store.write([RolloutRecord(rollout_id=f"{group_id}-s{s}", group_id=group_id, question_id=task.id,
                                       policy_version=version["now"], prompt_token_ids=[1], completion_token_ids=[2],
                                       completion_logprobs=[-0.1], completion_text="x", format_ok=True,
                                       correct=s == 0, reward=float(s == 0))
                         for group_id, task in zip(request.group_ids(), request.tasks) for s in range(GROUP_SIZE)])
            self.came_back.add(request.batch_id)

        def poll(self, timeout_s):
            return []

        def take_given_up(self):
            return []

        def wait_sampled(self, timeout_s, on_wait):
            on_wait()
            return True

    def look_after_actors():
        if version["rebuild"]:  # as the driver's care does: a rebuilt learner publishes a new version
            version["rebuild"] = False
            version["now"] += 1
            collector.raise_floor(version["now"])

    collector = GroupCollector(Feed(), store, TaskSampler(TASKS, seed=7), staleness, Cursor(), segment="seg",
                               first_version=1, questions_per_batch=1, refill_rounds=0, filter_zero_spread=False,
                               on_wait=look_after_actors, count=lambda name, n: None, in_request_order=True)
    collector.collect(lambda: version["now"])
    version["now"] += 1
    staleness.publish()
    version["rebuild"] = True
    groups = collector.collect(lambda: version["now"]).groups
    assert [group[0].policy_version for group in groups] == [version["now"]] * 2


def segment(store, sampler, staleness, pick, *, name, steps, in_request_order):
    """One run segment (its own store and versions from 0, as the stand-in feed counts them): its collector and
    the question ids each step trained on."""
    feed = OrderedFeed(store, staleness, pick)
    collector = GroupCollector(
        feed, store, sampler, staleness, Cursor(), segment=name, first_version=0,
        questions_per_batch=1, refill_rounds=0, filter_zero_spread=False, on_wait=lambda: None,
        count=lambda name, n: None, stall_timeout_s=60, in_request_order=in_request_order)
    trained = []
    for step in range(steps):
        trained.append([group[0].question_id for group in collector.collect(lambda v=step: v).groups])
        staleness.publish()
    return collector, trained


@pytest.mark.parametrize("in_request_order", [True, False])
def test_a_resumed_run_draws_again_the_questions_admitted_but_not_trained(tmp_path, in_request_order):
    """At k = 2 up to 2·Q questions are admitted ahead of the step that trains; the checkpoint's sampler state
    names them, so the resumed segment trains them rather than skipping them. In request order the questions
    trained across the resume are the uninterrupted run's, step for step."""
    def fresh():
        return ReplayStore(str(tmp_path / f"store-{random.random()}")), StalenessManager(groups_per_step=3,
                                                                                          max_staleness=2)
    store, staleness = fresh()
    _, straight = segment(store, TaskSampler(TASKS, seed=7), staleness, oldest, name="a", steps=6,
                          in_request_order=in_request_order)
    store, staleness = fresh()
    first, before = segment(store, TaskSampler(TASKS, seed=7), staleness, oldest, name="b", steps=3,
                            in_request_order=in_request_order)
    saved = first.sampler_state()
    assert len(saved["requeue"]) == len(first.outstanding) > 0
    store, staleness = fresh()
    resumed = training_sampler(TASKS, 7, None, saved)
    _, after = segment(store, resumed, staleness, oldest, name="c", steps=3, in_request_order=in_request_order)
    assert before + after == straight
    assert "requeue" not in training_sampler(TASKS, 7, None, saved).inner.state()


def resumed_segment(store, saved, pending, *, base, steps, in_request_order, name="c"):
    """A segment resumed from a checkpoint's sampler state and pending groups over the same store, as
    cluster/grpo_recipe.py does it: its versions start at ``base``, above every version in the store."""
    staleness = StalenessManager(groups_per_step=3, max_staleness=2)
    carried, sampler_state = carried_over(store, pending, saved, limit=staleness.capacity(),
                                          max_staleness=staleness.max_staleness, group_size=GROUP_SIZE,
                                          train_ids={task.id for task in TASKS})
    feed = OrderedFeed(store, staleness, oldest, base=base)
    collector = GroupCollector(
        feed, store, training_sampler(TASKS, 7, None, sampler_state), staleness, Cursor(), segment=name,
        first_version=base, questions_per_batch=1, refill_rounds=0, filter_zero_spread=False,
        on_wait=lambda: None, count=lambda name, n: None, stall_timeout_s=60, in_request_order=in_request_order)
    collector.carry_over(carried, shift=base - pending.version)
    trained = []
    for step in range(steps):
        groups = collector.collect(lambda v=base + step: v).groups
        assert all(0 <= base + step - group[0].policy_version <= staleness.max_staleness for group in groups)
        trained.append(groups)
        staleness.publish()
    return collector, [group.records[0].group_id for group in carried], trained


def straight_and_stopped(tmp_path, in_request_order):
    """At k = 2: the questions 6 steps train unbroken, and a run stopped after 3 (its store, collector, steps)."""
    _, straight = segment(ReplayStore(str(tmp_path / "straight")), TaskSampler(TASKS, seed=7), StalenessManager(3, 2),
                          oldest, name="a", steps=6, in_request_order=in_request_order)
    store = ReplayStore(str(tmp_path / "resumed"))
    first, before = segment(store, TaskSampler(TASKS, seed=7), StalenessManager(3, 2), oldest, name="b", steps=3,
                            in_request_order=in_request_order)
    return straight, store, first, before


def questions(steps) -> list[list[str]]:
    return [[group[0].question_id for group in step] for step in steps]


@pytest.mark.parametrize("in_request_order", [True, False])
@pytest.mark.parametrize("came_back", ["all", "the first half", "none"])
def test_a_resumed_run_trains_the_groups_its_checkpoint_admitted_ahead_as_they_were_sampled(
        tmp_path, in_request_order, came_back):
    """At k = 2 the checkpoint after step 3 names 2·Q groups admitted ahead; the stopped segment lets them come
    back (cluster/grpo_recipe.py), writing their records. The resumed segment trains those records, the very
    samples, and requests only the questions whose groups never came back, so the questions trained across the
    resume are the uninterrupted run's, step for step, and no question is sampled twice. A group that came back
    only after the stopped segment published other weights (its best policy, for the held-out evaluation) is
    left alone and its question drawn again."""
    straight, store, first, before = straight_and_stopped(tmp_path, in_request_order)
    saved, pending = first.sampler_state(), first.pending(version=3)
    assert [group.question_id for group in pending.groups] == saved["requeue"] and len(pending.groups) == 6
    in_flight = [request for request, _ in first.feed.in_flight]
    arrived = {"all": len(in_flight), "the first half": len(in_flight) // 2, "none": 0}[came_back]
    for _ in range(arrived):
        first.feed.poll(timeout_s=0)
    store.write([RolloutRecord(rollout_id=f"{group_id}-s{s}", group_id=group_id, question_id=task.id,
                               policy_version=4, prompt_token_ids=[1], completion_token_ids=[2],
                               completion_logprobs=[-0.1], completion_text="x", format_ok=True, correct=False,
                               reward=0.0)  # sampled by the best policy, published as v4 after the stop
                 for request in in_flight[arrived:] for group_id, task in zip(request.group_ids(), request.tasks)
                 for s in range(GROUP_SIZE)])
    late = {group_id for request in in_flight[arrived:] for group_id in request.group_ids()}
    came = [group.group_id for group in pending.groups if group.group_id not in late]
    if came_back != "none":
        assert len(came) == 6 if came_back == "all" else 0 < len(came) < 6

    resumed, carried, after = resumed_segment(store, saved, pending, base=5, steps=3,
                                              in_request_order=in_request_order)
    assert carried == came
    assert before + questions(after) == straight
    trained_ids = [group[0].group_id for step in after for group in step]
    assert trained_ids[:len(came)] == came  # the samples the stopped segment drew, not new ones
    assert all(group_id.startswith("c-") for group_id in trained_ids[len(came):])
    requested = [task.id for request in resumed.feed.submitted for task in request.tasks]
    assert requested[:len(pending.groups) - len(came)] == [
        group.question_id for group in pending.groups if group.group_id not in came]


@pytest.mark.parametrize("in_request_order", [True, False])
def test_a_group_carried_over_and_not_yet_trained_is_carried_over_again_by_the_next_resume(tmp_path,
                                                                                         in_request_order):
    """At k = 2 a resumed segment that stops after one step still holds Q of the 2·Q groups it carried over; its
    checkpoint names them with their offset from the store's numbering, so the next resume finds them, at the
    right versions (the staleness bound holds on every group), and the three segments train the unbroken run's
    questions, each sampled once."""
    straight, store, first, before = straight_and_stopped(tmp_path, in_request_order)
    while first.feed.in_flight:
        first.feed.poll(timeout_s=0)
    second, carried, middle = resumed_segment(store, first.sampler_state(), first.pending(version=3), base=5,
                                              steps=1, in_request_order=in_request_order)
    assert len(carried) == 6
    pending = second.pending(version=6)
    offsets = {group.group_id: group.offset for group in pending.groups}
    assert [offsets[group_id] for group_id in carried[3:]] == [2, 2, 2]  # first version 5 is the snapshot's 3
    while second.feed.in_flight:
        second.feed.poll(timeout_s=0)
    _, carried_again, last = resumed_segment(store, second.sampler_state(), pending, base=9, steps=2,
                                             in_request_order=in_request_order, name="d")
    assert carried_again[:3] == carried[3:] and len(carried_again) == len(pending.groups)
    assert before + questions(middle) + questions(last) == straight


def record(group_id: str, question_id: str, version: int, sample: int = 0) -> RolloutRecord:
    return RolloutRecord(rollout_id=f"{group_id}-s{sample}", group_id=group_id, question_id=question_id,
                         policy_version=version, prompt_token_ids=[1], completion_token_ids=[2],
                         completion_logprobs=[-0.1], completion_text="x", format_ok=True, correct=True, reward=1.0)


def test_a_pending_group_is_carried_over_only_when_it_fits_the_run_as_it_is_now(tmp_path):
    """The sampler state's requeue must start with the snapshot's questions; the group must be found whole (G
    samples), of a question in the training split, at a version no staler than k and not below the floor, and
    there must be room for it."""
    store = ReplayStore(str(tmp_path / "store"))
    pending = PendingGroups(version=3, floor=0, groups=(PendingGroup("b-7-q0", "t1"), PendingGroup("b-8-q0", "t2")))
    store.write([record("b-7-q0", "t1", 2, sample) for sample in range(GROUP_SIZE)] + [record("b-8-q0", "t2", 3)])
    fits = {"limit": 3, "max_staleness": 1, "group_size": GROUP_SIZE, "train_ids": {"t1", "t2", "t9"}}

    def carried(state, pending=pending, **change):
        groups, left = carried_over(store, pending, state, **(fits | change))
        return [group.records[0].group_id for group in groups], left

    state = {"position": 4, "requeue": ["t1", "t2", "t9"]}
    assert carried(state) == (["b-7-q0"], {"position": 4, "requeue": ["t2", "t9"]})  # b-8 has 1 sample of 2
    assert carried(state, group_size=1) == (["b-8-q0"], {"position": 4, "requeue": ["t1", "t9"]})
    assert carried({"position": 4, "requeue": ["t9"]}) == ([], {"position": 4, "requeue": ["t9"]})
    assert carried(state, limit=0)[0] == []
    assert carried(state, max_staleness=0)[0] == []  # too stale for the k it resumes with
    assert carried(state, train_ids={"t2"})[0] == []  # its question moved out of the training split
    assert carried(state, pending=PendingGroups(3, floor=3, groups=pending.groups))[0] == []
    assert carried(state, pending=PendingGroups(1, floor=0, groups=pending.groups))[0] == []  # sampled after
    assert PendingGroups.from_json(pending.to_json()) == pending and PendingGroups.from_json({}) == PendingGroups()
