"""KIP-932's ``simple`` assignor, computed as Kafka 4.3's group coordinator computes it.

**Theory of operation.** Kafka's ``SimpleAssignor`` (``group-coordinator/.../assignor/``)
spreads the *assignable* partitions of the subscribed topics (those whose share-partition
state is initialized) over the members. When members outnumber partitions, partitions are
shared: each partition gets ``desiredSharing = ceil(members / partitions)`` members, and each
member a quota of ``desiredSharing * partitions / members`` assignments, rounded so that the
quotas add up (the first members in the assignor's order take the rounding up). Balance is
kept first, stickiness second: a member keeps what it had unless it is over its quota or a
partition is over-shared. With members of different subscriptions (*heterogeneous*), the
same is done per topic over that topic's subscribers.

Which member gets the extra partition, which partition an over-quota member gives up and
which member a free partition goes to are decided by the iteration order of Java's
``HashMap``/``HashSet`` (keyed by member ids, topic ids, ``TopicIdPartition`` s) and of Kafka's
``TimelineHashMap`` of the group's members. To assign exactly as Kafka does, this module
ports ``SimpleHomogeneousAssignmentBuilder`` and ``SimpleHeterogeneousAssignmentBuilder``
line by line over :class:`JavaHashMap`, a model of the JDK's ``HashMap`` iteration order
(the JDK 21+ sizing rules: Apache Kafka's image runs Java 21), and :class:`MemberTable`, a
model of ``TimelineHashMap``'s. The inputs carry the orders Kafka's inputs have:

* members in the group's ``TimelineHashMap`` order (:meth:`MemberTable.order`), each with its
  subscribed names in the order its ``HashSet`` was built from (sorted, as Kafka's replay of a
  member record builds it; the heartbeating member's in its request's order);
* each member's current target in the order of its ``ShareGroupTargetAssignmentMember``
  record (which is the iteration order of the map the assignor returned then).

Known limit: a ``HashMap`` bin of eight or more keys in a table of 64 or more slots becomes a
red-black tree in the JDK, whose insertion order is not modelled here (the bin keeps
insertion order). That needs eight keys colliding in one bin; it does not change what is
assigned, only, possibly, which of equal choices is taken.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar
from uuid import UUID

K = TypeVar("K")
V = TypeVar("V")

_MASK32 = 0xFFFF_FFFF
_MASK64 = 0xFFFF_FFFF_FFFF_FFFF
_MAX_CAPACITY = 1 << 30
_INT_MAX = 2**31 - 1
_TREEIFY_THRESHOLD = 8
_MIN_TREEIFY_CAPACITY = 64

#: The assignor's name (``SimpleAssignor.name()``), as ShareGroupDescribe reports it.
SIMPLE_ASSIGNOR_NAME = "simple"


class AssignorError(Exception):
    """Kafka's ``PartitionAssignorException``: the heartbeat is answered UNKNOWN_SERVER_ERROR."""


# -- Java's hash codes -------------------------------------------------------------------


def _i32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x8000_0000 else value


def java_string_hash(text: str) -> int:
    """``String.hashCode``: over UTF-16 code units."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return _i32(h)


def java_uuid_hash(topic_id: UUID) -> int:
    """Kafka's ``Uuid.hashCode``: the two halves xor-ed, folded to 32 bits."""
    xor = (topic_id.int >> 64) ^ (topic_id.int & _MASK64)
    return _i32((xor >> 32) ^ (xor & _MASK32))


def java_int_hash(value: int) -> int:
    """``Integer.hashCode``."""
    return _i32(value)


def java_topic_partition_hash(tp: tuple[UUID, int]) -> int:
    """``TopicIdPartition`` is a record: ``31 * topicId.hashCode() + partitionId``."""
    return _i32(31 * java_uuid_hash(tp[0]) + tp[1])


def _spread(h: int) -> int:
    """``HashMap.hash``: the high half folded into the low one."""
    h &= _MASK32
    return h ^ (h >> 16)


def _table_size_for(capacity: int) -> int:
    """``HashMap.tableSizeFor``."""
    if capacity <= 1:
        return 1
    return min(1 << (capacity - 1).bit_length(), _MAX_CAPACITY)


class JavaHashMap(Generic[K, V]):
    """A ``java.util.HashMap`` as far as its iteration order goes: the same table sizes,
    resizes and bins, keys appended to their bin by ``put`` and prepended by
    ``computeIfAbsent``, as the JDK does. Lookups go through a Python dict."""

    __slots__ = ("_hash", "_hashes", "_table", "_threshold", "_values")

    def __init__(self, hasher: Callable[[K], int], capacity: int | None = None) -> None:
        self._hash = hasher
        self._values: dict[K, V] = {}
        self._hashes: dict[K, int] = {}
        self._table: list[list[K]] | None = None
        # HashMap(int): the capacity waits in the threshold until the first insertion.
        self._threshold = 0 if capacity is None else _table_size_for(capacity)

    @classmethod
    def for_mappings(cls, hasher: Callable[[K], int], mappings: int) -> JavaHashMap[K, V]:
        """Kafka's ``AssignorHelpers.newHashMap`` / ``newHashSet``:
        ``new HashMap<>((int) (((n + 1) / 0.75f) + 1))``."""
        return cls(hasher, (4 * (mappings + 1)) // 3 + 1)

    @classmethod
    def copy_of(cls, hasher: Callable[[K], int], items: Sequence[K]) -> JavaHashMap[K, None]:
        """``new HashSet<>(collection)`` (JDK 19+: ``HashMap.newHashMap(max(n, 12))``)."""
        made: JavaHashMap[K, None] = JavaHashMap(hasher, math.ceil(max(len(items), 12) / 0.75))
        for item in items:
            made.put(item, None)
        return made

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __getitem__(self, key: K) -> V:
        return self._values[key]

    def get(self, key: K) -> V | None:
        """``get``: the value, or ``None``."""
        return self._values.get(key)

    def ordered(self) -> list[K]:
        """The keys in the JDK's iteration order (a snapshot: the loops of Kafka's code that
        remove the key they are at, through the iterator, see the others as before)."""
        return [k for b in self._table or () for k in b]

    def items(self) -> list[tuple[K, V]]:
        """``entrySet()`` in the JDK's iteration order (a snapshot)."""
        return [(k, self._values[k]) for k in self.ordered()]

    def __iter__(self) -> Iterator[K]:
        return iter(self.ordered())

    def put(self, key: K, value: V) -> None:
        """``put`` (and ``HashSet.add``): a new key goes to the end of its bin."""
        if key in self._values:
            self._values[key] = value
            return
        if self._table is None:
            self._resize()
        assert self._table is not None
        h = self._hashes[key] = _spread(self._hash(key))
        bin_ = self._table[h & (len(self._table) - 1)]
        long_chain = len(bin_) >= _TREEIFY_THRESHOLD
        bin_.append(key)
        self._values[key] = value
        if long_chain and len(self._table) < _MIN_TREEIFY_CAPACITY:
            self._resize()  # treeifyBin on a small table
        if len(self._values) > self._threshold:
            self._resize()

    def compute_if_absent(self, key: K, make: Callable[[], V]) -> V:
        """``computeIfAbsent``: a new key goes to the front of its bin, and a table over its
        threshold grows first, whether the key is there or not (as the JDK checks)."""
        if self._table is None or len(self._values) > self._threshold:
            self._resize()
        assert self._table is not None
        found = self._values.get(key)
        if found is not None:
            return found
        value = make()
        if key in self._values or value is None:  # a null mapping: replaced, or nothing added
            if value is not None:
                self._values[key] = value
            return value
        h = self._hashes[key] = _spread(self._hash(key))
        bin_ = self._table[h & (len(self._table) - 1)]
        long_chain = len(bin_) >= _TREEIFY_THRESHOLD - 1
        bin_.insert(0, key)
        self._values[key] = value
        if long_chain and len(self._table) < _MIN_TREEIFY_CAPACITY:
            self._resize()
        return value

    def remove(self, key: K) -> bool:
        """``remove``: whether the key was there; the others keep their order."""
        if key not in self._values:
            return False
        del self._values[key]
        h = self._hashes.pop(key)
        assert self._table is not None
        self._table[h & (len(self._table) - 1)].remove(key)
        return True

    def _resize(self) -> None:
        old = self._table
        old_cap = len(old) if old is not None else 0
        new_thr = 0
        if old_cap > 0:
            if old_cap >= _MAX_CAPACITY:
                self._threshold = _INT_MAX
                return
            new_cap = old_cap << 1
            if new_cap < _MAX_CAPACITY and old_cap >= 16:
                new_thr = self._threshold << 1
        elif self._threshold > 0:
            new_cap = self._threshold
        else:
            new_cap, new_thr = 16, 12
        if new_thr == 0:
            new_thr = int(new_cap * 0.75) if new_cap < _MAX_CAPACITY else _INT_MAX
        self._threshold = new_thr
        table: list[list[K]] = [[] for _ in range(new_cap)]
        for bin_ in old or ():
            for key in bin_:  # the JDK's lo/hi split keeps each bin's order
                table[self._hashes[key] & (new_cap - 1)].append(key)
        self._table = table


JavaHashSet = JavaHashMap[K, None]


class _SetIterator(Generic[K]):
    """A ``HashSet`` iterator that outlives one loop (``remove`` drops the last key)."""

    def __init__(self, owner: JavaHashMap[K, None]) -> None:
        self._owner = owner
        self._keys = owner.ordered()
        self._at = 0
        self._last: K | None = None

    def has_next(self) -> bool:
        return self._at < len(self._keys)

    def next(self) -> K:
        if not self.has_next():
            raise AssignorError("NoSuchElementException")  # what Java would throw
        self._last = self._keys[self._at]
        self._at += 1
        return self._last

    def remove(self) -> None:
        assert self._last is not None
        self._owner.remove(self._last)
        self._last = None


def _int_set(capacity: int | None = None) -> JavaHashMap[int, None]:
    return JavaHashMap(java_int_hash, capacity)


# -- TimelineHashMap's order ---------------------------------------------------------------


class MemberTable:
    """The iteration order of a share group's members in Kafka (``ModernGroup.members``, a
    ``TimelineHashMap`` over ``BaseHashTable``): Fibonacci-hashed slots, a table that
    doubles past a load of 0.75 and never shrinks, each slot's members in insertion order
    and iterated from its last (``SnapshottableHashTable.CurrentIterator``)."""

    __slots__ = ("_size", "_slots")

    def __init__(self, member_ids: Sequence[str] = ()) -> None:
        self._slots: list[list[str]] = [[], []]  # expectedSizeToCapacity(0) is 2
        self._size = 0
        for member_id in member_ids:
            self.add(member_id)

    @staticmethod
    def _slot(member_id: str, length: int) -> int:
        product = (java_string_hash(member_id) * -7046029254386353131) & _MASK64
        return product >> (65 - length.bit_length())

    def add(self, member_id: str) -> None:
        """``put`` of a new member (a known one keeps its place)."""
        if member_id in self._slots[self._slot(member_id, len(self._slots))]:
            return
        if (self._size + 1) * 0.75 > len(self._slots):
            old, self._slots = self._slots, [[] for _ in range(len(self._slots) * 2)]
            for slot in old:
                for known in slot:
                    self._slots[self._slot(known, len(self._slots))].append(known)
        self._slots[self._slot(member_id, len(self._slots))].append(member_id)
        self._size += 1

    def remove(self, member_id: str) -> None:
        """``remove``: the others keep their order."""
        slot = self._slots[self._slot(member_id, len(self._slots))]
        if member_id in slot:
            slot.remove(member_id)
            self._size -= 1

    def order(self) -> list[str]:
        """The members as Kafka iterates them."""
        return [m for slot in self._slots for m in reversed(slot)]


# -- the assignor ----------------------------------------------------------------------------

Target = dict[UUID, tuple[int, ...]]
"""A member's target: topic id -> partitions, both in Kafka's record order (a topic may
remain with no partitions, as Kafka's assignor leaves it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AssignorMember:
    """What the assignor knows of one member (``MemberSubscriptionAndAssignmentImpl``)."""

    member_id: str
    #: Subscribed topic names, in the order the member's ``HashSet`` was built from.
    subscribed_topic_names: tuple[str, ...]
    #: Its current target, in record order.
    target: Mapping[UUID, Sequence[int]]


@dataclass(frozen=True, slots=True)
class _Spec:
    names: JavaHashMap[str, None]
    old: JavaHashMap[UUID, JavaHashMap[int, None]]


def _from_record(target: Mapping[UUID, Sequence[int]]) -> JavaHashMap[UUID, JavaHashMap[int, None]]:
    """``Assignment.fromRecord``: ``Collectors.toMap`` into a ``HashMap``, each partition list
    into a ``HashSet``."""
    made: JavaHashMap[UUID, JavaHashMap[int, None]] = JavaHashMap(java_uuid_hash)
    for topic, parts in target.items():
        made.put(topic, JavaHashMap.copy_of(java_int_hash, list(parts)))
    return made


def _deep_copy(old: JavaHashMap[UUID, JavaHashMap[int, None]]) -> JavaHashMap[UUID, JavaHashMap[int, None]]:
    """``AssignorHelpers.deepCopyAssignment``."""
    made: JavaHashMap[UUID, JavaHashMap[int, None]] = JavaHashMap(java_uuid_hash, len(old))
    for topic, parts in old.items():
        made.put(topic, JavaHashMap.copy_of(java_int_hash, parts.ordered()))
    return made


class _Group:
    """``GroupSpecImpl`` plus ``TopicIds`` over the topic metadata."""

    def __init__(self, members: Sequence[AssignorMember], topics: Mapping[str, tuple[UUID, int]],
                 assignable: Mapping[UUID, frozenset[int]]) -> None:
        self.topics = topics
        self.names_by_id = {tid: name for name, (tid, _) in topics.items()}
        self.assignable = assignable
        # TargetAssignmentBuilder.build: members.forEach into a default HashMap.
        self.specs: JavaHashMap[str, _Spec] = JavaHashMap(java_string_hash)
        for m in members:
            self.specs.put(m.member_id, _Spec(JavaHashMap.copy_of(java_string_hash, list(m.subscribed_topic_names)),
                                              _from_record(m.target)))

    def topic_ids(self, member_id: str) -> list[UUID]:
        """``TopicIds`` iteration: the names' set order, names unknown to the metadata skipped."""
        return [self.topics[n][0] for n in self.specs[member_id].names if n in self.topics]

    def subscribes(self, member_id: str, topic: UUID) -> bool:
        name = self.names_by_id.get(topic)
        return name is not None and name in self.specs[member_id].names

    def partitions(self, topic: UUID) -> int:
        name = self.names_by_id.get(topic)
        if name is None:
            raise AssignorError(f"Members are subscribed to topic {topic} which doesn't exist in the topic metadata.")
        return self.topics[name][1]

    def is_assignable(self, topic: UUID, partition: int) -> bool:
        return partition in self.assignable.get(topic, frozenset())


def simple_assign(members: Sequence[AssignorMember], *, homogeneous: bool,
                  topics: Mapping[str, tuple[UUID, int]],
                  assignable: Mapping[UUID, frozenset[int]]) -> dict[str, Target]:
    """``SimpleAssignor.assign``: every member's new target, in Kafka's record order.

    ``members`` in the group's member order (:meth:`MemberTable.order`); ``homogeneous`` is
    the group's subscription type (every subscribed name subscribed by every member);
    ``topics`` maps names to (topic id, partition count); ``assignable`` holds the
    initialized share-partitions, the only ones Kafka assigns."""
    if not members:
        return {}
    group = _Group(members, topics, assignable)
    member_ids = group.specs.ordered()
    if homogeneous:
        built = _Homogeneous(group, member_ids).build()
    else:
        built = _Heterogeneous(group, member_ids).build()
    return {member_ids[i]: {t: tuple(ps.ordered()) for t, ps in assigned.items()} for i, assigned in enumerate(built)}


Assignment = JavaHashMap[UUID, JavaHashMap[int, None]]


def _quotas(sharing: int, partitions: int, members: int) -> list[int]:
    """The desired assignment count of each of ``members`` (in order)."""
    precise = sharing * partitions / members
    return [math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i in range(members)]


class _Homogeneous:
    """``SimpleHomogeneousAssignmentBuilder``, step for step."""

    def __init__(self, group: _Group, member_ids: list[str]) -> None:
        self.group = group
        self.member_ids = member_ids
        n = len(member_ids)
        self.subscribed = group.topic_ids(member_ids[0])
        self.subscribed_set = set(self.subscribed)
        self.targets: list[tuple[UUID, int]] = []
        for topic in self.subscribed:
            count = group.partitions(topic)
            self.targets += [(topic, p) for p in range(count) if group.is_assignable(topic, p)]
        self.sharing = 0 if not self.targets else (n + len(self.targets) - 1) // len(self.targets)
        self.old: list[Assignment] = [group.specs[m].old for m in member_ids]
        self.new: dict[int, Assignment] = {}
        self.by_partition: JavaHashMap[tuple[UUID, int], JavaHashMap[int, None]] = JavaHashMap.for_mappings(
            java_topic_partition_hash, len(self.targets))
        self.by_member: JavaHashMap[int, JavaHashMap[tuple[UUID, int], None]] = JavaHashMap.for_mappings(
            java_int_hash, n)
        self.unfilled: JavaHashMap[int, None] = JavaHashMap.for_mappings(java_int_hash, n)
        self.overfilled: JavaHashMap[int, None] = JavaHashMap.for_mappings(java_int_hash, n)
        self.desired = _quotas(self.sharing, len(self.targets), n) if self.targets else [0] * n

    def build(self) -> list[Assignment]:
        if not self.subscribed:
            return [JavaHashMap(java_uuid_hash) for _ in self.member_ids]
        self._revoke_unassignable()
        self._revoke_overfilled()
        self._revoke_overshared()
        for tp in self.targets:
            self.by_partition.compute_if_absent(tp, lambda: JavaHashMap(java_int_hash))
        self._assign_remaining()
        return [self.new.get(i, self.old[i]) for i in range(len(self.member_ids))]

    def _revoke_unassignable(self) -> None:
        for index, old in enumerate(self.old):
            new: Assignment | None = None
            count = 0
            desired = self.desired[index]
            for topic, parts in old.items():
                if topic in self.subscribed_set:
                    for p in parts:
                        tp = (topic, p)
                        count += 1
                        self.by_partition.compute_if_absent(tp, lambda: JavaHashMap(java_int_hash)).put(index, None)
                        self.by_member.compute_if_absent(index, lambda: JavaHashMap(java_topic_partition_hash)).put(
                            tp, None)
                        if count >= desired and new is None:
                            new = _deep_copy(old)
                else:
                    if new is None:
                        new = _deep_copy(old)
                    new.remove(topic)
            if new is not None:
                self.new[index] = new
            if count < desired:
                self.unfilled.put(index, None)
            elif count > desired:
                self.overfilled.put(index, None)

    def _revoke_overfilled(self) -> None:
        for index in self.overfilled:
            desired = self.desired[index]
            held = self.by_member[index]
            if len(held) > desired:
                for tp in held.ordered():
                    self.new[index][tp[0]].remove(tp[1])
                    self.by_partition[tp].remove(index)
                    held.remove(tp)
                    if len(held) == desired:
                        break

    def _revoke_overshared(self) -> None:
        for tp, holders in self.by_partition.items():
            count = len(holders)
            if count > self.sharing:
                for index in holders.ordered():
                    new = self.new.get(index)
                    if new is None:
                        new = self.new[index] = _deep_copy(self.old[index])
                    parts = new.get(tp[0])
                    if parts is not None and parts.remove(tp[1]):
                        count -= 1
                        holders.remove(index)
                        self.by_member[index].remove(tp)
                        self.unfilled.put(index, None)
                    if count <= self.sharing:
                        break

    def _assign_remaining(self) -> None:
        if not len(self.unfilled):
            return
        members = _SetIterator(self.unfilled)
        assigned_this_pass = False
        for tp, holders in self.by_partition.items():
            if len(holders) < self.sharing:
                to_make = self.sharing - len(holders)
                while to_make > 0:
                    if not members.has_next():
                        if not assigned_this_pass:
                            break
                        members = _SetIterator(self.unfilled)
                        assigned_this_pass = False
                    index = members.next()
                    if index not in holders:
                        new = self.new.get(index)
                        if new is None:
                            new = self.new[index] = _deep_copy(self.old[index])
                        new.compute_if_absent(tp[0], lambda: JavaHashMap(java_int_hash)).put(tp[1], None)
                        self.by_member.compute_if_absent(index, lambda: JavaHashMap(java_topic_partition_hash)).put(
                            tp, None)
                        to_make -= 1
                        assigned_this_pass = True
                        if len(self.by_member[index]) >= self.desired[index]:
                            members.remove()
            if not len(self.unfilled):
                break


class _Heterogeneous:
    """``SimpleHeterogeneousAssignmentBuilder``, step for step."""

    def __init__(self, group: _Group, member_ids: list[str]) -> None:
        self.group = group
        self.member_ids = member_ids
        self.subscribed: JavaHashMap[UUID, None] = JavaHashMap(java_uuid_hash)
        for m in member_ids:
            for topic in group.topic_ids(m):
                self.subscribed.put(topic, None)
        self.targets: dict[UUID, list[int]] = {}
        for topic in self.subscribed:
            count = group.partitions(topic)
            self.targets[topic] = [p for p in range(count) if group.is_assignable(topic, p)]
        self.subscribers: dict[UUID, list[int]] = {}
        for index, m in enumerate(member_ids):
            for topic in group.topic_ids(m):
                self.subscribers.setdefault(topic, []).append(index)
        self.old: list[Assignment] = [group.specs[m].old for m in member_ids]
        self.new: dict[int, Assignment] = {}

    def build(self) -> list[Assignment]:
        if not len(self.subscribed):
            return [JavaHashMap(java_uuid_hash) for _ in self.member_ids]
        for topic in self.subscribed:
            _TopicBuilder(self, topic).build()
        return [self.new.get(i, self.old[i]) for i in range(len(self.member_ids))]


class _TopicBuilder:
    """``SimpleHeterogeneousAssignmentBuilder.TopicAssignmentPartialBuilder``."""

    def __init__(self, outer: _Heterogeneous, topic: UUID) -> None:
        self.outer = outer
        self.topic = topic
        self.targets = outer.targets[topic]
        self.subscribers = outer.subscribers[topic]
        self.by_partition: JavaHashMap[int, JavaHashMap[int, None]] = JavaHashMap.for_mappings(
            java_int_hash, len(self.targets))
        self.by_member: JavaHashMap[int, JavaHashMap[int, None]] = JavaHashMap.for_mappings(
            java_int_hash, len(self.subscribers))
        self.sharing = 0 if not self.targets else (len(self.subscribers) + len(self.targets) - 1) // len(self.targets)
        self.desired = [0] * len(outer.member_ids)
        if self.subscribers:
            for i, q in enumerate(_quotas(self.sharing, len(self.targets), len(self.subscribers))):
                self.desired[self.subscribers[i]] = q

    def _new(self, index: int) -> Assignment:
        new = self.outer.new.get(index)
        if new is None:
            new = self.outer.new[index] = _deep_copy(self.outer.old[index])
        return new

    def build(self) -> None:
        self._revoke_unassignable()
        self._revoke_overfilled()
        self._revoke_overshared()
        for p in self.targets:
            self.by_partition.compute_if_absent(
                p, lambda: JavaHashMap.for_mappings(java_int_hash, len(self.subscribers)))
        self._assign_remaining()

    def _revoke_unassignable(self) -> None:
        for index, old in enumerate(self.outer.old):
            if not len(old):
                continue
            parts = old.get(self.topic)
            if parts is not None:
                # The topic is always among the subscribed ones here: Kafka's else branch
                # (drop an unsubscribed topic) cannot run.
                for p in parts:
                    self.by_partition.compute_if_absent(p, lambda: JavaHashMap(java_int_hash)).put(index, None)
                    self.by_member.compute_if_absent(index, lambda: JavaHashMap(java_int_hash)).put(p, None)

    def _revoke_overfilled(self) -> None:
        for index, held in self.by_member.items():
            desired = self.desired[index]
            if len(held) > desired:
                new = self.outer.new.get(index)
                for p in held.ordered():
                    if len(held) <= desired:
                        break
                    self.by_partition[p].remove(index)
                    held.remove(p)
                    if new is None:
                        new = self._new(index)
                    new[self.topic].remove(p)

    def _revoke_overshared(self) -> None:
        for p, holders in self.by_partition.items():
            count = len(holders)
            if count > self.sharing:
                for index in holders.ordered():
                    parts = self._new(index).get(self.topic)
                    if parts is not None and parts.remove(p):
                        count -= 1
                        holders.remove(index)
                        self.by_member[index].remove(p)
                    if count <= self.sharing:
                        break

    def _assign_remaining(self) -> None:
        unfilled: JavaHashMap[int, None] = JavaHashMap.for_mappings(java_int_hash, len(self.outer.member_ids))
        for index in self.subscribers:
            held = self.by_member.get(index)
            if (0 if held is None else len(held)) < self.desired[index]:
                unfilled.put(index, None)
        members = _SetIterator(unfilled)
        assigned_this_pass = False
        for p, holders in self.by_partition.items():
            if len(holders) < self.sharing:
                to_make = self.sharing - len(holders)
                while to_make > 0:
                    if not members.has_next():
                        if not assigned_this_pass:
                            break
                        members = _SetIterator(unfilled)
                        assigned_this_pass = False
                    index = members.next()
                    if index not in holders:
                        self._new(index).compute_if_absent(self.topic, lambda: JavaHashMap(java_int_hash)).put(p, None)
                        self.by_member.compute_if_absent(index, lambda: JavaHashMap(java_int_hash)).put(p, None)
                        to_make -= 1
                        assigned_this_pass = True
                        if len(self.by_member[index]) >= self.desired[index]:
                            members.remove()
            if not len(unfilled):
                break
