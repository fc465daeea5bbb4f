package slot

import "strings"

// Count is the number of hash slots in a Redis Cluster.
const Count = 16384

// KeySlot returns the hash slot of key exactly as Redis Cluster computes it:
// CRC16 of the key modulo 16384, where only the part between the first '{'
// and the first '}' after it is hashed when that part is non-empty (the hash
// tag). Keys are arbitrary bytes; a Go string carries them unchanged.
func KeySlot(key string) uint16 {
	return crc16String(HashTag(key)) & (Count - 1)
}

// KeySlotBytes is KeySlot for a key held as bytes.
func KeySlotBytes(key []byte) uint16 {
	if s := strings.IndexByte(string(key), '{'); s >= 0 {
		if e := strings.IndexByte(string(key[s+1:]), '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return CRC16(key) & (Count - 1)
}

// HashTag returns the part of key that Redis hashes: the non-empty text
// between the first '{' and the first '}' after it, or the whole key when
// there is no such text. "foo{}{bar}" hashes whole because its first tag is
// empty; "foo{{bar}}zap" hashes "{bar".
func HashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}
