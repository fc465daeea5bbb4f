package redistest

import "strconv"

// keySlot is Redis Cluster's CRC16-XMODEM(key) mod 16384, without hash tags
// (the harness only hashes its own tag-free keys). The slot package has the
// real implementation; the harness keeps its own so it depends on nothing
// that it is used to test.
func keySlot(key string) int {
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % numSlots
}

// keyInShard returns a key whose slot the shard owns, for writes that must
// reach one particular master.
func keyInShard(prefix string, s shard) string {
	for i := 0; ; i++ {
		k := prefix + strconv.Itoa(i)
		if s.owns(keySlot(k)) {
			return k
		}
	}
}

// keyInSlot returns a key that hashes to slot, using a hash tag found by
// search; tests use it to fill the slot that MoveSlot moves.
func keyInSlot(slot int, name string) string {
	for i := 0; ; i++ {
		tag := strconv.Itoa(i)
		if keySlot(tag) == slot {
			return "{" + tag + "}" + name
		}
	}
}
