package sketch

// HotSlots is how many hot labels each CPU keeps per vital (HOT_SLOTS in
// bpf/sketch.h).
const HotSlots = 8

// Compile-time check: a slot is chosen by masking.
var _ = [1]struct{}{}[HotSlots&(HotSlots-1)]

// HotSlot is one hot label of a CPU, laid out as the kernel's struct
// hot_slot: the label's key (its identity as a program sees it before
// hashing, say the process and the call site), its hash under the copy's
// seed, the weight it may still gain before its estimate reaches the next
// power of t, and the weight gathered in the slot since it last went into
// the counters. A slot is empty when Left is 0.
type HotSlot struct {
	Key     [3]uint64
	Hash    uint64
	Left    uint32
	Pending uint32
}

// Hot is one CPU's hot labels of one vital (hl_stats.hot in the kernel).
//
// An event whose label is in its slot and whose weight keeps the label
// below its next power of t is only added to the slot: it could not be
// sampled, so neither the hash nor the counters are needed. The event that
// would reach the power goes into the counters with what the slot
// gathered, and is sampled as it would have been without the slot. So a
// label alone in its counters is sampled at exactly the events it would
// be sampled at by HCA.Add; a label whose counters it shares with a hot
// label sees that label's weight only when it leaves its slot or crosses
// a power, which can move its own samples by a few events either way.
type Hot [HotSlots]HotSlot

// Slot is the slot of the label keyed k0, k1 (hot_slot_of in bpf/sketch.h);
// the key's third word is compared but does not choose the slot.
func (h *Hot) Slot(k0, k1 uint64) *HotSlot {
	x := k0 ^ k1
	return &h[(x^(x>>8)^(x>>16))&(HotSlots-1)]
}

// hit is hot_hit: the slot holds key and the weight keeps it below its
// next power of t; the slot takes the weight.
func (s *HotSlot) hit(key [3]uint64, weight uint32) bool {
	if weight >= s.Left || s.Key != key {
		return false
	}
	s.Left -= weight
	s.Pending += weight
	return true
}

// AddHot accounts one event of label l, keyed key, through the hot slots
// hot and then, unless its slot takes it, the counters, as the kernel's
// programs do (hot_hit, then sketch_event). It reports whether the event is
// sampled, the label's estimate when it went into the counters (0 when
// its slot took it), and whether the slot took it.
func (h *HCA) AddHot(hot *Hot, key [3]uint64, l Label, weight uint32, shift uint) (sampled bool, est uint32, hit bool) {
	s := hot.Slot(key[0], key[1])
	if s.hit(key, weight) {
		return false, 0, true
	}
	add := uint64(weight)
	if s.Key == key {
		add += uint64(s.Pending)
	} else if s.Pending != 0 {
		// Below its next power: the slot's label cannot be sampled by it.
		for r := range Rows {
			h.Counters[r][(s.Hash>>(16*r))&(Width-1)] += s.Pending
		}
	}
	hsh := Hash(h.Seed, l)
	old := uint64(^uint32(0))
	for r := range Rows {
		c := &h.Counters[r][(hsh>>(16*r))&(Width-1)]
		old = min(old, uint64(*c))
		*c += uint32(add)
	}
	newv := min(old+add, uint64(^uint32(0)))
	*s = HotSlot{Key: key, Hash: hsh, Left: roomBelowNext(newv, shift)}
	first := seenFirst(h.Seen[:], hsh)
	return first || Level(newv, shift) > Level(old, shift), uint32(newv), false
}

// roomBelowNext is how much weight an estimate est >= 1 may gain before
// it reaches the next power of t = 1<<shift (room_below_next in
// bpf/sketch.h); estimates stop at 2^32 - 1.
func roomBelowNext(est uint64, shift uint) uint32 {
	if shift == 0 {
		shift = 1
	}
	next := uint64(Level(est, shift)+1) * uint64(shift)
	if next >= 32 {
		return uint32(uint64(^uint32(0)) - est)
	}
	return uint32(1<<next - est)
}
