package slot

import (
	"fmt"
	"testing"
)

var sinkSlot uint16

func BenchmarkKeySlot16(b *testing.B) {
	key := "order:1234567890" // 16 bytes
	b.ReportAllocs()
	for b.Loop() {
		sinkSlot = KeySlot(key)
	}
}

func BenchmarkKeySlotTagged(b *testing.B) {
	key := "{user1000}.following"
	b.ReportAllocs()
	for b.Loop() {
		sinkSlot = KeySlot(key)
	}
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("order:%d", i*7919)
	}
	return keys
}

func BenchmarkSorted1000(b *testing.B) {
	keys := benchKeys(1000)
	b.ReportAllocs()
	for b.Loop() {
		_ = Sorted(keys)
	}
}

func BenchmarkSorted100(b *testing.B) {
	keys := benchKeys(100)
	b.ReportAllocs()
	for b.Loop() {
		_ = Sorted(keys)
	}
}

func BenchmarkGroupByNode1000(b *testing.B) {
	m := NewMap()
	_ = m.Assign(0, 5460, "n0")
	_ = m.Assign(5461, 10922, "n1")
	_ = m.Assign(10923, 16383, "n2")
	sorted := Sorted(benchKeys(1000))
	b.ReportAllocs()
	for b.Loop() {
		_, _ = GroupByNode(sorted, m)
	}
}

func BenchmarkLockKey(b *testing.B) {
	n, _ := NewNamer("")
	b.ReportAllocs()
	for b.Loop() {
		_ = n.LockKey("order:1234567890")
	}
}
