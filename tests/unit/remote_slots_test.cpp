//===- remote_slots_test.cpp - Shared-memory slots' state protocol --------===//
//
// remote/lib/Slots.h: the trainer lends memfd slots, a worker on the same
// host writes an output's fields into one, the trainer takes it only when
// the worker finished writing under that slot's lease, and a slot whose
// stream ended is lent again only once no worker can still write it. Both
// ends run in this process (a worker opens /proc/PID/fd/N, here this
// process's own), so every step of the protocol is checked in order,
// without timing.
//
//===----------------------------------------------------------------------===//
#include "Slots.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace sluice;
using namespace sluice::remote::detail;

namespace {

/// The rent-or-buy rule these tests count writes by is the fixed one (the
/// measured rule depends on the host: Slots.cpp); set before any slot is
/// written.
[[maybe_unused]] const bool kFixedRule = [] {
  setenv("SLUICE_NO_SLOT_MAP_CALIBRATION", "1", 0);
  return true;
}();

Tensor bytes(size_t n, uint8_t first) {
  Tensor t = Tensor::empty(ElemType::U8, {static_cast<int64_t>(n)});
  for (size_t i = 0; i < n; ++i)
    t.mutableRaw()[i] = static_cast<uint8_t>(first + i);
  return t;
}

/// The state word of a slot as the worker sees it (its header's last
/// field, after magic, nonce and capacity).
std::atomic<uint64_t> *stateOf(const uint8_t *data) {
  return reinterpret_cast<std::atomic<uint64_t> *>(const_cast<uint8_t *>(data) -
                                                   kSlotDataOffset + 32);
}

/// Each test's trainer pool.
class RemoteSlots : public ::testing::Test {
protected:
  void SetUp() override {
    pool = SlotPool::create();
    ASSERT_TRUE(pool) << "memfd_create";
  }
  /// One slot of at least `bytes`, the pool holding at most `limit`; an
  /// empty list (and a failure) when none is lent.
  std::vector<SlotRef> lendOne(size_t bytes, size_t limit) {
    std::vector<SlotRef> v = pool->lend(1, bytes, limit);
    EXPECT_EQ(v.size(), 1u);
    if (v.size() != 1)
      v.clear();
    return v;
  }
  std::shared_ptr<SlotPool> pool;
};

} // namespace

TEST_F(RemoteSlots, LayoutAlignsEachField) {
  std::vector<size_t> offsets;
  EXPECT_EQ(slotLayout({3, 64, 1}, offsets), 129u);
  EXPECT_EQ(offsets, (std::vector<size_t>{0, 64, 128}));
  EXPECT_EQ(slotLayout({}, offsets), 0u);
}

TEST_F(RemoteSlots, WrittenSlotIsTakenWithTheWorkersBytes) {
  std::vector<SlotRef> lent = pool->lend(2, 1000, 8);
  ASSERT_EQ(lent.size(), 2u);
  EXPECT_NE(lent[0].lease, lent[1].lease);
  EXPECT_NE(lent[0].path, lent[1].path);
  SlotWriter w(lent, bootId());
  std::vector<Tensor> fields = {bytes(10, 1), bytes(300, 7)};
  ASSERT_TRUE(w.write(1, fields));
  EXPECT_FALSE(w.unreachable());
  // Slot 0 was not written: the trainer does not take it.
  const uint8_t *data = nullptr;
  EXPECT_EQ(pool->take(lent[0], data), nullptr);
  std::shared_ptr<const void> held = pool->take(lent[1], data);
  ASSERT_TRUE(held);
  EXPECT_EQ(std::memcmp(data, fields[0].raw(), 10), 0);
  EXPECT_EQ(std::memcmp(data + 64, fields[1].raw(), 300), 0);
  // Taken once only.
  const uint8_t *again = nullptr;
  EXPECT_EQ(pool->take(lent[1], again), nullptr);
  pool->giveBack(lent[0]);
  // Held by the output: not lent again until it is dropped.
  std::vector<SlotRef> next = pool->lend(2, 1000, 2);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].path, lent[0].path);
  held.reset();
  std::vector<SlotRef> more = lendOne(1000, 2);
  ASSERT_FALSE(more.empty());
  EXPECT_EQ(more[0].path, lent[1].path);
  EXPECT_EQ(pool->size(), 2u);
}

TEST_F(RemoteSlots, SlotsGoBackToTheWorkerTheyWereLentTo) {
  int a = 0, b = 0;
  std::vector<SlotRef> toB = pool->lend(2, 1000, 8, &b);
  std::vector<SlotRef> toA = pool->lend(2, 1000, 8, &a);
  ASSERT_EQ(toA.size(), 2u);
  ASSERT_EQ(toB.size(), 2u);
  for (const SlotRef &r : toB)
    pool->giveBack(r);
  for (const SlotRef &r : toA)
    pool->giveBack(r);
  // B's slots are ahead of A's in the pool, all four free: each worker
  // gets its own back.
  std::vector<SlotRef> againA = pool->lend(2, 1000, 8, &a);
  std::vector<SlotRef> againB = pool->lend(2, 1000, 8, &b);
  ASSERT_EQ(againA.size(), 2u);
  ASSERT_EQ(againB.size(), 2u);
  std::set<std::string> pathsA = {toA[0].path, toA[1].path};
  std::set<std::string> pathsB = {toB[0].path, toB[1].path};
  EXPECT_EQ(std::set<std::string>({againA[0].path, againA[1].path}), pathsA);
  EXPECT_EQ(std::set<std::string>({againB[0].path, againB[1].path}), pathsB);
  for (const SlotRef &r : againA)
    pool->giveBack(r);
  // None of its own free: another's free slot before a new one.
  int c = 0;
  std::vector<SlotRef> toC = pool->lend(1, 1000, 8, &c);
  ASSERT_EQ(toC.size(), 1u);
  EXPECT_TRUE(pathsA.count(toC[0].path));
  EXPECT_EQ(pool->size(), 4u);
}

TEST_F(RemoteSlots, BoundedWorkerGetsTheLastFreedSlotOrWaitsForOne) {
  int a = 0;
  const size_t bound = 3;
  auto always = [] { return true; };
  std::vector<SlotRef> lent = pool->lend(3, 1000, 8, &a, bound, always);
  ASSERT_EQ(lent.size(), 3u);
  EXPECT_EQ(pool->made(), 3);
  // Freed in the order 2, 0: slot 0 was freed last and comes first.
  pool->giveBack(lent[2]);
  pool->giveBack(lent[0]);
  std::vector<SlotRef> again = pool->lend(1, 1000, 8, &a, bound, always);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].path, lent[0].path);
  again = pool->lend(1, 1000, 8, &a, bound, always);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].path, lent[2].path);
  // All three lent, the bound reached: a slot given back meanwhile is lent
  // instead of a new one.
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pool->giveBack(lent[1]);
  });
  again = pool->lend(1, 1000, 8, &a, bound, always,
                     std::chrono::milliseconds(10000));
  later.join();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].path, lent[1].path);
  EXPECT_EQ(pool->made(), 3);
  EXPECT_EQ(pool->waits(), 1);
  // Waiting cannot help (the consumer waits itself), or the wait is over:
  // made, up to the limit.
  std::vector<SlotRef> more = pool->lend(
      1, 1000, 8, &a, bound, [] { return false; },
      std::chrono::milliseconds(10000));
  ASSERT_EQ(more.size(), 1u);
  more =
      pool->lend(1, 1000, 8, &a, bound, always, std::chrono::milliseconds(20));
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(pool->made(), 5);
  // Unbounded (SLUICE_NO_SLOT_BOUND=1): made at once, never a wait.
  more = pool->lend(1, 1000, 8, &a);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(pool->made(), 6);
  EXPECT_EQ(pool->waits(), 2);
}

TEST_F(RemoteSlots, SlotIsWrittenWithPwriteThenMapped) {
  // One slot written again and again by one worker: through pwrite for its
  // first slotMapAfterWrites() writes, through a mapping after; the
  // trainer reads each output's own bytes either way.
  const uint64_t after = slotMapAfterWrites();
  const uint64_t writes = after + 3;
  int64_t pwritten = 0, mapped = 0;
  std::string path;
  for (uint64_t k = 0; k < writes; ++k) {
    std::vector<SlotRef> lent = lendOne(5000, 1);
    ASSERT_FALSE(lent.empty());
    if (k == 0)
      path = lent[0].path;
    EXPECT_EQ(lent[0].path, path);
    SlotWriter w(lent, bootId());
    std::vector<Tensor> fields = {bytes(4097, static_cast<uint8_t>(k)),
                                  bytes(3, static_cast<uint8_t>(2 * k))};
    ASSERT_TRUE(w.write(0, fields));
    pwritten += w.pwritten();
    mapped += w.mapped();
    EXPECT_EQ(w.pwritten() + w.mapped(), 1);
    EXPECT_EQ(w.mapped(), k >= after ? 1 : 0) << "write " << k;
    const uint8_t *data = nullptr;
    std::shared_ptr<const void> held = pool->take(lent[0], data);
    ASSERT_TRUE(held);
    EXPECT_EQ(std::memcmp(data, fields[0].raw(), 4097), 0) << "write " << k;
    EXPECT_EQ(std::memcmp(data + 4160, fields[1].raw(), 3), 0) << "write " << k;
  }
  EXPECT_EQ(pwritten, static_cast<int64_t>(after));
  EXPECT_EQ(mapped, 3);
}

TEST_F(RemoteSlots, SlotsWithinTheTrainersBoundAreMappedAtTheirFirstWrite) {
  // The trainer says it lends this worker at most 2 slots at once
  // (ProduceRequest.slot_bound): the worker maps 2 of its slots at their
  // first write, and writes any other one with pwrite until the rent-or-buy
  // rule maps it (here the fixed rule, 10 writes). The trainer reads each
  // output's own bytes either way.
  if (slotMapAfterWrites() == 0)
    GTEST_SKIP() << "every slot is mapped at its first write here";
  std::vector<SlotRef> lent = pool->lend(3, 5000, 8);
  ASSERT_EQ(lent.size(), 3u);
  for (SlotRef &r : lent)
    r.bound = 2;
  const int64_t before = slotMappingsMade();
  SlotWriter w(lent, bootId());
  std::vector<std::vector<Tensor>> fields;
  for (size_t i = 0; i < 3; ++i) {
    fields.push_back({bytes(4097, static_cast<uint8_t>(7 * i))});
    ASSERT_TRUE(w.write(i, fields.back())) << i;
  }
  EXPECT_EQ(w.mapped(), 2);
  EXPECT_EQ(w.pwritten(), 1);
  EXPECT_EQ(slotMappingsMade() - before, 2);
  for (size_t i = 0; i < 3; ++i) {
    const uint8_t *data = nullptr;
    std::shared_ptr<const void> held = pool->take(lent[i], data);
    ASSERT_TRUE(held) << i;
    EXPECT_EQ(std::memcmp(data, fields[i][0].raw(), 4097), 0) << i;
  }
}

TEST_F(RemoteSlots, TooLargeOrUnknownSlotIsNotWritten) {
  std::vector<SlotRef> lent = lendOne(100, 4);
  ASSERT_FALSE(lent.empty());
  SlotWriter w(lent, bootId());
  // More than the slot holds (slots come in 2 MiB steps): over the socket.
  EXPECT_FALSE(w.write(0, {bytes(lent[0].capacity + 1, 0)}));
  EXPECT_FALSE(w.unreachable());
  // No slot 1 was lent.
  EXPECT_FALSE(w.write(1, {bytes(10, 0)}));
  // Another host's boot id: the worker does not try.
  SlotWriter elsewhere(lent, "another-host");
  EXPECT_FALSE(elsewhere.write(0, {bytes(10, 0)}));
  EXPECT_TRUE(elsewhere.unreachable());
  // A path that is no slot of this trainer's (a wrong nonce).
  std::vector<SlotRef> forged = lent;
  forged[0].nonce[1] ^= 1;
  SlotWriter wrong(forged, bootId());
  EXPECT_FALSE(wrong.write(0, {bytes(10, 0)}));
  EXPECT_TRUE(wrong.unreachable());
  // Only /proc/PID/fd/N paths are opened.
  std::vector<SlotRef> file = lent;
  file[0].path = "/etc/passwd";
  SlotWriter other(file, bootId());
  EXPECT_FALSE(other.write(0, {bytes(10, 0)}));
  EXPECT_TRUE(other.unreachable());
}

TEST_F(RemoteSlots, GivenBackSlotCannotBeWrittenAnyMore) {
  std::vector<SlotRef> lent = lendOne(100, 4);
  ASSERT_FALSE(lent.empty());
  pool->giveBack(lent[0]); // the stream was cut before the worker wrote
  SlotWriter late(lent, bootId());
  EXPECT_FALSE(late.write(0, {bytes(10, 0)}));
  // Lent again under a new lease: a write under the old one still fails,
  // one under the new lease succeeds.
  std::vector<SlotRef> again = lendOne(100, 4);
  ASSERT_FALSE(again.empty());
  EXPECT_EQ(again[0].path, lent[0].path);
  EXPECT_NE(again[0].lease, lent[0].lease);
  EXPECT_FALSE(late.write(0, {bytes(10, 0)}));
  SlotWriter now(again, bootId());
  EXPECT_TRUE(now.write(0, {bytes(10, 3)}));
}

TEST_F(RemoteSlots, SlotBeingWrittenIsSetAsideUntilWritten) {
  std::vector<SlotRef> lent = lendOne(100, 1);
  ASSERT_FALSE(lent.empty());
  SlotWriter w(lent, bootId());
  ASSERT_TRUE(w.write(0, {bytes(10, 0)}));
  const uint8_t *data = nullptr;
  std::shared_ptr<const void> h = pool->take(lent[0], data);
  ASSERT_TRUE(h);
  std::atomic<uint64_t> *state = stateOf(data);
  h.reset();
  // A worker caught between its move to "writing" and its last store (as
  // a stream cut mid-write leaves it), simulated on the state word.
  std::vector<SlotRef> second = lendOne(100, 1);
  ASSERT_FALSE(second.empty());
  state->store(second[0].lease + 1);
  pool->giveBack(second[0]);
  EXPECT_EQ(pool->setAside(), 1u);
  // The pool is at its limit and its one slot may still be written.
  EXPECT_TRUE(pool->lend(1, 100, 1).empty());
  // The worker's last store: the slot is free again.
  state->store(second[0].lease + 2);
  std::vector<SlotRef> third = lendOne(100, 1);
  ASSERT_FALSE(third.empty());
  EXPECT_EQ(pool->setAside(), 0u);
  EXPECT_EQ(third[0].path, lent[0].path);
}

TEST_F(RemoteSlots, LargerOutputsReplaceSmallerFreeSlotsAtTheLimit) {
  std::vector<SlotRef> small = lendOne(100, 1);
  ASSERT_FALSE(small.empty());
  pool->giveBack(small[0]);
  std::vector<SlotRef> big = lendOne(small[0].capacity + 1, 1);
  ASSERT_FALSE(big.empty());
  EXPECT_GT(big[0].capacity, small[0].capacity);
  EXPECT_EQ(pool->size(), 1u);
  SlotWriter w(big, bootId());
  EXPECT_TRUE(w.write(0, {bytes(small[0].capacity + 1, 9)}));
}

namespace {

/// A slot of a pool holding one, written `slotMapAfterWrites()` times with
/// pwrite (each output taken and dropped), so that this process's worker
/// side maps it from its next write on; then lent once more: `ref`.
SlotRef mappedSlot(SlotPool &pool, size_t bytes) {
  for (uint64_t k = 0; k < slotMapAfterWrites(); ++k) {
    std::vector<SlotRef> lent = pool.lend(1, bytes, 1);
    EXPECT_EQ(lent.size(), 1u);
    SlotWriter w(lent, bootId());
    EXPECT_TRUE(w.write(0, {Tensor::empty(ElemType::U8, {1})}));
    const uint8_t *data = nullptr;
    EXPECT_TRUE(pool.take(lent[0], data));
  }
  std::vector<SlotRef> lent = pool.lend(1, bytes, 1);
  EXPECT_EQ(lent.size(), 1u);
  return lent.empty() ? SlotRef() : lent[0];
}

/// A batch's fields as the batch step asks for them: 128 rows of 32 x 32
/// f32 (512 KiB, a buffer the tensor pool serves) and 128 i64 labels
/// (1 KiB, an ordinary small buffer).
const std::vector<ElemType> kElems = {ElemType::F32, ElemType::I64};
const std::vector<std::vector<int64_t>> kShapes = {{128, 32, 32}, {128}};

void fill(std::vector<Tensor> &fields, uint8_t seed) {
  for (size_t f = 0; f < fields.size(); ++f)
    for (size_t i = 0; i < fields[f].nbytes(); ++i)
      fields[f].mutableRaw()[i] = static_cast<uint8_t>(seed + 3 * f + i);
}

} // namespace

TEST_F(RemoteSlots, PipelineMakesTheBatchInItsSlot) {
  SlotRef ref = mappedSlot(*pool, 600 << 10);
  ASSERT_FALSE(ref.path.empty());
  auto batches = std::make_shared<SlotBatches>(7, bootId());
  batches->lend(7, {ref});
  // No slot for batch 1 (output 8): ordinary buffers.
  EXPECT_TRUE(batches->allocate(1, kElems, kShapes).empty());
  std::vector<Tensor> fields = batches->allocate(0, kElems, kShapes);
  ASSERT_EQ(fields.size(), 2u);
  EXPECT_EQ(batches->made(), 1);
  // Being written: the trainer does not take it.
  const uint8_t *data = nullptr;
  EXPECT_FALSE(pool->take(ref, data));
  fill(fields, 5);
  ASSERT_TRUE(batches->handOver(ref, fields));
  std::shared_ptr<const void> held = pool->take(ref, data);
  ASSERT_TRUE(held);
  EXPECT_EQ(std::memcmp(data, fields[0].raw(), fields[0].nbytes()), 0);
  EXPECT_EQ(std::memcmp(data + fields[0].nbytes(), fields[1].raw(),
                        fields[1].nbytes()),
            0);
  // The image is the slot's memory itself (not a copy): a store through
  // the batch's buffer shows in the trainer's mapping.
  fields[0].mutableRaw()[100] ^= 0xff;
  EXPECT_EQ(data[100], fields[0].raw()[100]);
  // Handed over once.
  EXPECT_FALSE(batches->handOver(ref, fields));
}

TEST_F(RemoteSlots, BatchNotMadeInItsSlotIsNotHandedOver) {
  SlotRef ref = mappedSlot(*pool, 600 << 10);
  auto batches = std::make_shared<SlotBatches>(0, bootId());
  batches->lend(0, {ref});
  std::vector<Tensor> inSlot = batches->allocate(0, kElems, kShapes);
  ASSERT_EQ(inSlot.size(), 2u);
  // The output is another buffer (a step after the batch made a new one):
  // not handed over, and the slot stays the worker's (a copy under its
  // lease fails: the output goes over the socket).
  std::vector<Tensor> other = {Tensor::empty(kElems[0], kShapes[0]),
                               Tensor::empty(kElems[1], kShapes[1])};
  fill(other, 1);
  EXPECT_FALSE(batches->handOver(ref, other));
  SlotWriter w({ref}, bootId());
  EXPECT_FALSE(w.write(0, other));
  // The stream ends: the trainer sets the slot aside while the worker's
  // pipeline may still write it, and it is free once the batch is freed.
  pool->giveBack(ref);
  EXPECT_EQ(pool->setAside(), 1u);
  EXPECT_TRUE(pool->lend(1, 600 << 10, 1).empty());
  inSlot.clear();
  std::vector<SlotRef> again = pool->lend(1, 600 << 10, 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].path, ref.path);
  EXPECT_EQ(pool->setAside(), 0u);
  // Never read as written under the old lease.
  const uint8_t *data = nullptr;
  EXPECT_FALSE(pool->take(ref, data));
}

TEST_F(RemoteSlots, SlotTakenBackIsNotMadeIn) {
  SlotRef ref = mappedSlot(*pool, 600 << 10);
  auto batches = std::make_shared<SlotBatches>(0, bootId());
  batches->lend(0, {ref});
  // The stream was cut before the pipeline reached this batch.
  pool->giveBack(ref);
  EXPECT_TRUE(batches->allocate(0, kElems, kShapes).empty());
  // Lent again under a new lease to another request: the old lease's batch
  // is still not made there.
  std::vector<SlotRef> again = pool->lend(1, 600 << 10, 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(batches->allocate(0, kElems, kShapes).empty());
  auto next = std::make_shared<SlotBatches>(0, bootId());
  next->lend(0, again);
  EXPECT_EQ(next->allocate(0, kElems, kShapes).size(), 2u);
  // Another host's trainer: never.
  auto elsewhere = std::make_shared<SlotBatches>(0, "another-host");
  elsewhere->lend(0, again);
  EXPECT_TRUE(elsewhere->allocate(0, kElems, kShapes).empty());
}

TEST_F(RemoteSlots, BufferOfAnEarlierLeaseKeepsTheSlotFromANewBatch) {
  SlotRef ref = mappedSlot(*pool, 600 << 10);
  auto batches = std::make_shared<SlotBatches>(0, bootId());
  batches->lend(0, {ref});
  std::vector<Tensor> first = batches->allocate(0, kElems, kShapes);
  ASSERT_EQ(first.size(), 2u);
  fill(first, 2);
  ASSERT_TRUE(batches->handOver(ref, first));
  const uint8_t *data = nullptr;
  ASSERT_TRUE(pool->take(ref, data)); // taken and dropped by the trainer
  std::vector<SlotRef> again = pool->lend(1, 600 << 10, 1);
  ASSERT_EQ(again.size(), 1u);
  ASSERT_EQ(again[0].path, ref.path);
  batches->lend(1, again);
  // The first batch's buffer (the same address) is still held: no batch is
  // made there until it is freed, and its release leaves the new lease be.
  EXPECT_TRUE(batches->allocate(1, kElems, kShapes).empty());
  first.clear();
  EXPECT_FALSE(pool->take(again[0], data));
  std::vector<Tensor> second = batches->allocate(1, kElems, kShapes);
  ASSERT_EQ(second.size(), 2u);
  fill(second, 9);
  ASSERT_TRUE(batches->handOver(again[0], second));
  std::shared_ptr<const void> held = pool->take(again[0], data);
  ASSERT_TRUE(held);
  EXPECT_EQ(std::memcmp(data, second[0].raw(), second[0].nbytes()), 0);
}

TEST_F(RemoteSlots, SlotNotMappedYetIsNotMadeIn) {
  if (slotMapAfterWrites() == 0)
    GTEST_SKIP() << "every slot is mapped at its first write here";
  std::vector<SlotRef> lent = pool->lend(1, 600 << 10, 1);
  ASSERT_EQ(lent.size(), 1u);
  auto batches = std::make_shared<SlotBatches>(0, bootId());
  batches->lend(0, lent);
  // Written with pwrite until the rent-or-buy rule maps it (Slots.cpp).
  EXPECT_TRUE(batches->allocate(0, kElems, kShapes).empty());
  EXPECT_EQ(batches->made(), 0);
}

TEST_F(RemoteSlots, BatchFreedUnsentLeavesItsSlotToTheCopy) {
  // The batch step made a full batch in the slot, then found the pass
  // ending (a short last batch, made again at its own size): the slot is
  // lent under its lease again, and the short output is copied into it.
  SlotRef ref = mappedSlot(*pool, 600 << 10);
  auto batches = std::make_shared<SlotBatches>(0, bootId());
  batches->lend(0, {ref});
  std::vector<Tensor> full = batches->allocate(0, kElems, kShapes);
  ASSERT_EQ(full.size(), 2u);
  full.clear();
  std::vector<Tensor> shortBatch = {Tensor::empty(ElemType::F32, {3, 32, 32}),
                                    Tensor::empty(ElemType::I64, {3})};
  fill(shortBatch, 4);
  EXPECT_FALSE(batches->handOver(ref, shortBatch));
  SlotWriter w({ref}, bootId());
  ASSERT_TRUE(w.write(0, shortBatch));
  const uint8_t *data = nullptr;
  std::shared_ptr<const void> held = pool->take(ref, data);
  ASSERT_TRUE(held);
  EXPECT_EQ(std::memcmp(data, shortBatch[0].raw(), shortBatch[0].nbytes()), 0);
}

namespace {

/// The mappings of file `inode` in /proc/self/smaps (a slot's memfd): for
/// each, its size, whether huge pages were advised ("hg" among its
/// VmFlags) and the bytes mapped by huge pages (ShmemPmdMapped).
struct SlotMappingPages {
  size_t bytes = 0;
  bool advised = false;
  size_t pmdMappedBytes = 0;
};
std::vector<SlotMappingPages> mappingsOf(ino_t inode) {
  std::vector<SlotMappingPages> out;
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool in = false;
  while (std::getline(f, line)) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first.empty())
      continue;
    if (first.back() != ':') {
      // "lo-hi perms offset dev inode path"
      std::string perms, offset, dev;
      unsigned long ino = 0;
      words >> perms >> offset >> dev >> ino;
      in = ino == inode;
      if (in) {
        size_t dash = first.find('-');
        out.push_back({std::stoul(first.substr(dash + 1), nullptr, 16) -
                           std::stoul(first.substr(0, dash), nullptr, 16),
                       false, 0});
      }
      continue;
    }
    if (!in)
      continue;
    if (first == "VmFlags:")
      out.back().advised = (line + " ").find(" hg ") != std::string::npos;
    else if (first == "ShmemPmdMapped:") {
      size_t kb = 0;
      words >> kb;
      out.back().pmdMappedBytes = kb * 1024;
    }
  }
  return out;
}

/// Whether this host's shmem_enabled lets shared memory have huge pages.
bool shmemHugePagesAllowedHere() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string line;
  return std::getline(f, line) && shmemAllowsHugePages(line);
}

/// Whether this kernel collapses a shared memory file's pages into a huge
/// one on request (MADV_COLLAPSE: Linux 6.1, not under shmem_enabled's
/// "deny"), tried on a memfd of its own.
bool collapseWorksHere() {
  constexpr size_t kHuge = size_t(2) << 20;
  int fd = memfd_create("probe", MFD_CLOEXEC);
  if (fd < 0)
    return false;
  bool ok = false;
  if (ftruncate(fd, kHuge) == 0) {
    void *room =
        mmap(nullptr, 2 * kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (room != MAP_FAILED) {
      uintptr_t a = (reinterpret_cast<uintptr_t>(room) + kHuge - 1) &
                    ~uintptr_t(kHuge - 1);
      void *p = mmap(reinterpret_cast<void *>(a), kHuge, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_FIXED, fd, 0);
      if (p != MAP_FAILED) {
        static_cast<volatile char *>(p)[0] = 1;
        ok = madvise(p, kHuge, 25 /* MADV_COLLAPSE */) == 0;
      }
      munmap(room, 2 * kHuge);
    }
  }
  close(fd);
  return ok;
}

} // namespace

TEST(RemoteSlotsHugePages, ShmemSettingsThatAllowThem) {
  EXPECT_TRUE(shmemAllowsHugePages("always within_size [advise] never deny "
                                   "force"));
  EXPECT_TRUE(shmemAllowsHugePages("[always] within_size advise never"));
  EXPECT_TRUE(shmemAllowsHugePages("always [within_size] advise never"));
  EXPECT_FALSE(shmemAllowsHugePages("always within_size advise [never] deny "
                                    "force"));
  EXPECT_FALSE(shmemAllowsHugePages("always within_size advise never [deny]"));
  EXPECT_FALSE(shmemAllowsHugePages(""));
  EXPECT_FALSE(shmemAllowsHugePages("advise"));
}

TEST_F(RemoteSlots, SlotsAreMadeOfHugePagesWhereTheHostAllowsThem) {
  // Both ends advise huge pages for a slot (and the trainer sizes it in
  // whole ones) where the host's shmem_enabled allows them on request;
  // where it does not, the trainer has the kernel collapse the slot's
  // pages into huge ones (where the kernel does: 6.1 on) and both ends map
  // them by 2 MiB entries. With SLUICE_NO_SLOT_COLLAPSE=1 not collapsed,
  // with SLUICE_NO_SLOT_HUGE_PAGES=1 neither advised nor collapsed, and the
  // bytes are the worker's every way.
  const bool collapses = collapseWorksHere();
  for (const char *off :
       {"", "SLUICE_NO_SLOT_COLLAPSE", "SLUICE_NO_SLOT_HUGE_PAGES"}) {
    if (*off)
      setenv(off, "1", 1);
    const bool huge = slotHugePagesEnabled();
    const bool collapse = !huge && slotCollapseEnabled();
    if (*off)
      EXPECT_FALSE(collapse);
    if (std::string(off) == "SLUICE_NO_SLOT_HUGE_PAGES")
      EXPECT_FALSE(huge);
    std::shared_ptr<SlotPool> p = SlotPool::create();
    ASSERT_TRUE(p);
    std::vector<SlotRef> lent = p->lend(1, 5 << 20, 8);
    ASSERT_EQ(lent.size(), 1u);
    lent[0].bound = 1; // mapped by the worker at its first write
    SlotWriter w(lent, bootId());
    std::vector<Tensor> fields = {bytes(5 << 20, 3)};
    ASSERT_TRUE(w.write(0, fields));
    EXPECT_EQ(w.mapped(), 1);
    const uint8_t *data = nullptr;
    std::shared_ptr<const void> held = p->take(lent[0], data);
    ASSERT_TRUE(held);
    EXPECT_EQ(std::memcmp(data, fields[0].raw(), 5 << 20), 0);
    // The trainer's mapping and the worker's (one process here; its
    // header page alone is a mapping of its own), both whole huge pages'
    // worth where they are used.
    struct stat st;
    ASSERT_EQ(stat(lent[0].path.c_str(), &st), 0);
    std::vector<SlotMappingPages> maps;
    for (const SlotMappingPages &m : mappingsOf(st.st_ino))
      if (m.bytes > kSlotDataOffset)
        maps.push_back(m);
    ASSERT_EQ(maps.size(), 2u);
    EXPECT_EQ(p->madeHuge(), huge || (collapse && collapses) ? 1 : 0) << off;
    for (const SlotMappingPages &m : maps) {
      EXPECT_EQ(m.advised, huge) << m.bytes;
      if (collapse && collapses) {
        // Collapsed whole: every 2 MiB of both mappings.
        EXPECT_EQ(m.pmdMappedBytes, m.bytes) << m.bytes;
      } else if (huge) {
        EXPECT_EQ(m.bytes % (size_t(2) << 20), 0u) << m.bytes;
        // Huge pages are what the kernel gives when it can (memory not too
        // fragmented): at least one of the slot's 2 MiB pages here.
        EXPECT_GT(m.pmdMappedBytes, 0u) << m.bytes;
      } else if (!shmemHugePagesAllowedHere()) {
        EXPECT_EQ(m.pmdMappedBytes, 0u) << m.bytes;
      }
      // (Unadvised, a slot may still get huge pages: "within_size" and
      // "always" give them to any file whose size allows.)
    }
    held.reset();
    p.reset();
    if (*off)
      unsetenv(off);
  }
}
