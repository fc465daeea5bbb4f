-- release: delete the lock keys the lease still holds, and leave every other
-- key alone (an expired lock may belong to someone else by now). Every key
-- is read before any is written: a key of a slot this node no longer
-- serves (a reshard in progress) fails the call on first touch, and then
-- nothing has been deleted, so the caller can resend the whole call to the
-- right node and get a true account of what was still held.
-- A reentrant lease leaves the key's hold set; the key goes when the set is
-- empty. A key a waiter marked ('!') is handed to the oldest waiter in its
-- queue (hand_off, common.lua), which a message on its inbox wakes at
-- once; with nobody in line it is deleted.
--
-- ARGV[1] holder, ARGV[2] lease token of a reentrant lease or ""
-- ARGV[3..] the lock keys when the call covers a whole node; a call for one
-- slot passes ARGV[3] = "", ARGV[4] = n: the lock keys are KEYS[1..n] (the
-- KEYS after them, hold sets, are declared for Redis's migration rules).
--
-- Returns the 1-based positions of the keys that the lease did not hold.
local holder, lease = ARGV[1], ARGV[2]
local keys, first, last = lock_keys(3)

local lost = {}
local ours = {} -- position -> the value read, or true for a plain held one
local lines = {} -- position -> hand_off_line's read of a marked key's queue
local now -- the server's time, read at the first marked key
local plain = lease == ''
for i = first, last do
  local v = redis.call('GET', keys[i])
  if plain and v == holder then
    -- The common case, settled without is_mine and the mark's test: a
    -- plain lease's value is its token, with no fence, no mark (a token
    -- has no '!') and no hold set. Each Lua step costs per key.
    ours[i] = true
  elseif is_mine(keys[i], v, holder, lease) then
    ours[i] = v
    if string.byte(v, -1) == 33 then -- '!': read the queue before writing
      now = now or now_ms()
      lines[i] = hand_off_line(keys[i], now)
    end
  else
    lost[#lost + 1] = i - first + 1
  end
end
for i = first, last do
  local v = ours[i]
  if v == true then
    redis.call('DEL', keys[i])
  elseif v then
    local gone = true
    if lease ~= '' then
      -- Count before removing: an HDEL of the last field deletes the
      -- hold set (rule M; TestMigratingSlotLastOwnerLease).
      local h = companion(keys[i], 'n')
      local n = redis.call('HLEN', h)
      gone = n - redis.call('HDEL', h, lease) == 0
    end
    if gone then
      if string.byte(v, -1) == 33 then -- '!'
        hand_off(keys[i], now, lines[i])
      else
        redis.call('DEL', keys[i])
      end
    end
  end
end
return lost
