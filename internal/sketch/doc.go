// Package sketch is the Go twin of holter's in-kernel sketch (bpf/sketch.h):
// the same hash counter arrays, the same hash and the same sampling decision,
// bit for bit, so that user space can interpret the counters it reads out of
// the kernel and so that the kernel's logic can be tested and simulated here.
//
// # Vital signs and sampling
//
// holter records "vital signs" after Chopstix (Bhatia et al., OSDI 2008,
// §4.1). Every event of a vital sign has a label, the identity of the event
// type (say a code address, an executable and a user, see Label), and a
// weight, what the event is worth (one for a plain occurrence, or a duration
// such as the time a task waited for I/O). Recording every event costs too
// much and recording a uniform sample drowns rare event types in frequent
// ones. Instead each event's label is hashed into a hash counter array (HCA),
// the counter grows by the event's weight, and the event is sampled when the
// counter, the estimated count of its label, reaches the next power of a
// threshold t = 2^shift: counts 1, t, t², ... So a label with count n in an
// epoch yields about log_t(n) + 1 samples (exactly floor(log2(n)/shift) + 1
// when it has a counter of its own in some row), and even a label seen once
// is sampled: rare event types are recorded, frequent ones cost only
// logarithmically more. See Level for the definition of "the next power".
//
// Weights make rare but expensive events count: an event of weight w adds w,
// so a label's estimate is its total weight, and a few long waits reach the
// same count as many short ones. A single event is sampled at most once,
// however, so the first event of weight w, which lifts the count from 0 to w
// at once, stands for all the levels up to w: n events of weight w collect
// 1 + Level(n*w) - Level(w) samples, not the 1 + Level(n*w) of n*w events of
// weight 1 (and more than the 1 + Level(n) of n events of weight 1).
//
// # Epochs
//
// Data are collected in epochs (§4.1.5). Each vital sign has two copies of its
// HCA: the kernel updates one while user space reads out and resets the
// other, and at the end of an epoch they are swapped, so no event falls in a
// gap. Each epoch hashes with a fresh seed, so labels that share counters in
// one epoch almost surely do not in the next. Sketch models the two copies;
// HCA is one copy, laid out exactly as the kernel's struct hca so that the
// value of the BPF array map decodes straight into HCA.Counters.
//
// # Several rows: a count-min sketch
//
// The paper's HCA is a single array of counters, indexed by the label hash,
// with no handling of collisions (§4.1.2). A collision only ever raises a
// counter, so no weight is lost from the counts (but for concurrent
// updates, see below), but it can hide a rare
// label: if its counter is shared with a frequent label, the count is
// already large when the rare events come, the powers of t are far apart, and
// the crossings tend to fall on the frequent label's events. That is the false
// negative of §5.3.
//
// holter spends the same memory differently: Rows = 4 rows of Width = 512
// 32-bit counters (8 KiB per copy) instead of one row of 2048, row r indexed
// by the 9 bits of one 64-bit hash that start at bit 16r. An event adds its
// weight to its counter in every row, and the label's estimate is the
// minimum over the rows, the row with the least collision noise. This is a
// count-min sketch of depth 4; the paper's HCA is the depth-1 case. A rare
// label is now hidden only if it shares a counter with a heavy label in all
// four rows. In simulation (Simulate; TestCoverage reports the table), a
// label with 0.1% of the 100 000 events of an epoch, among 200 background
// labels with Zipf(1.1) frequencies, went unsampled in about 5e-5 of the
// epochs with four rows of 512, against about 9e-3 with one row of 2048. So
// holter's coverage bar, after §5.3 (such a label is sampled at least once
// with probability >= 0.999), is met with room to spare at t = 2
// (DefaultShift), and the single row of the same memory would miss it. The
// price is four counter updates per event instead of one, within the same
// cache-resident 8 KiB. The kernel makes them with plain loads and stores,
// not atomics, which on the page allocator's path cost a quarter of its
// program's time (see sketch_add in bpf/sketch.h): two CPUs updating one
// counter at the same instant lose one weight from it.
//
// # First events
//
// A label whose counters are all shared with other labels already may cross
// no power of t at its first event. The more labels an epoch has, the
// likelier: a row of w counters still has a share e^(-n/w) of zeros after n
// labels, and a label seen once is missed when none of its four is. So each
// copy also keeps a seen array (HCA.Seen): a Bloom filter of the labels the
// epoch has seen, SeenBits bits, SeenHashes a label; an event whose label is
// not in it is sampled whatever its estimate. It misses a first event with
// probability (1 - e^(-kn/m))^k: 1e-5 for 500 labels an epoch, 7e-4 for
// 2000, 9e-3 for 5000, where the zero counters alone would miss 0.15, 0.92
// and all.
//
// # Hot slots
//
// The kernel's programs first look for an event's label among a few labels
// the CPU saw last (Hot, HCA.AddHot): an event that could not cross the next
// power of t only adds its weight there, so a storm of one label costs a few
// compares an event; the event that would cross goes into the counters with
// what the slot gathered, and is sampled as it would have been.
//
// # Other uses of the counters
//
// HCA.Estimate reads a label's estimate back, and HCA.DistinctEstimate
// estimates the number of distinct labels of an epoch by linear counting on
// the seen array.
//
// # Keeping the twins equal
//
// Mix64, Hash, Level, HCA.Add and HCA.AddHot must stay bit-exact with mix64,
// label_hash, level, seen_first, hot_hit and sketch_event in bpf/sketch.h. The tests compare them with golden
// values and with a C transcription of the kernel code compiled by gcc at test
// time (skipped if gcc is missing, unless the CI environment variable is set).
// Change both sides together.
package sketch
