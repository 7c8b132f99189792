package sketch_test

import (
	"fmt"

	"github.com/holter-dev/holter/internal/sketch"
)

func Example() {
	// Deterministic seeds for the example; nil would choose random ones.
	seed := uint64(0)
	s := sketch.New(sketch.DefaultShift, func() uint64 { seed++; return seed })

	// A call site hit 20 times is sampled at counts 1, 2, 4, 8 and 16.
	hot := sketch.Label{0xffffffff81234500, 0, 1000}
	for i := 1; i <= 20; i++ {
		if sampled, est := s.Add(hot, 1); sampled {
			fmt.Println("sample at count", est)
		}
	}
	// A call site hit once is sampled once: rare events are not drowned out.
	rare := sketch.Label{0xffffffff81abcd00, 0, 1000}
	sampled, _ := s.Add(rare, 1)
	fmt.Println("rare event sampled:", sampled)
	// One long wait weighs as much as many short ones.
	slow := sketch.Label{0x00007f0000001200, 0, 1000}
	_, est := s.Add(slow, 5000)
	fmt.Println("weighted estimate:", est)

	// End of the epoch: the finished copy is handed over, a fresh one is active.
	done := s.Swap()
	fmt.Println("finished copy:", done.Estimate(hot), done.Estimate(rare), done.Estimate(slow))
	fmt.Printf("distinct labels: about %.0f\n", done.DistinctEstimate())
	fmt.Println("active copy:", s.Active().Estimate(hot))
	// Output:
	// sample at count 1
	// sample at count 2
	// sample at count 4
	// sample at count 8
	// sample at count 16
	// rare event sampled: true
	// weighted estimate: 5000
	// finished copy: 20 1 5000
	// distinct labels: about 3
	// active copy: 0
}
