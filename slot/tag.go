package slot

import "sync"

// tagAlphabet holds the bytes tags are made of: no braces (a brace inside a
// tag would change which part Redis hashes) and nothing that needs quoting
// in redis-cli.
const tagAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

var (
	tagsOnce sync.Once
	// tagText holds every slot's tag at 3*slot, padded with zero bytes
	// (not in tagAlphabet) to 3: one 48 KiB string. A tag is read per
	// lock key named, at a random slot: an array of 16,384 string headers
	// (256 KiB) pointing at as many small strings across the heap cost
	// two cache misses per key, about 8% of slotlock's own client CPU at
	// K = 100 (docs/benchmarks.md); here it is one read, mostly cached.
	tagText string
)

// Tag returns a short string (one to three bytes from [0-9A-Za-z]) that
// hashes to slot s. Wrapping it in braces inside any key puts that key into
// slot s, whatever else the key contains. The table is the same in every
// process and version: for each slot, the first string in order of length,
// then of tagAlphabet, that hashes there. It is built once, on first use
// (about 250,000 checksums of three bytes, well under 10 ms).
func Tag(s uint16) string {
	tagsOnce.Do(buildTags)
	i := 3 * int(s&(Count-1))
	t := tagText[i : i+3]
	for t[len(t)-1] == 0 { // every tag has at least one byte
		t = t[:len(t)-1]
	}
	return t
}

func buildTags() {
	var t [Count]string
	left := Count
	var buf [3]byte
	// Lengths 1 to 3 cover every slot: 62^3 = 238,328 candidates for 16,384
	// slots. TestTagCoversEverySlot proves it.
	for n := 1; n <= len(buf) && left > 0; n++ {
		idx := make([]int, n)
		for {
			for i, j := range idx {
				buf[i] = tagAlphabet[j]
			}
			s := CRC16(buf[:n]) & (Count - 1)
			if t[s] == "" {
				t[s] = string(buf[:n])
				left--
			}
			// Advance idx like an odometer over the alphabet.
			i := n - 1
			for i >= 0 {
				idx[i]++
				if idx[i] < len(tagAlphabet) {
					break
				}
				idx[i] = 0
				i--
			}
			if i < 0 {
				break
			}
		}
	}
	packed := make([]byte, 3*Count)
	for i, tag := range t {
		copy(packed[3*i:], tag)
	}
	tagText = string(packed)
}
