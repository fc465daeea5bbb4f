-- shared_extend: renew the lease's holds of shared keys or permits
-- (shared.lua), all or nothing: if any entry is no longer held, none is
-- touched and every such entry is named (as extend.lua). A renewal moves
-- the lease's own expiry to now + ttl (earlier or later: Extend may
-- shorten a lease) and never shortens a key's life that other holders
-- count on; expired holders are pruned.
--
-- ARGV[1] holder, ARGV[2] lease token of a reentrant lease or ""
-- ARGV[3] ttl in milliseconds
-- ARGV[4] 's' shared keys or 'p' permits, ARGV[5..] the entries
--         (request_entries in shared.lua)
--
-- Returns the 1-based positions of the entries the lease did not hold.
local holder, lease, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local keys, first, last, permits = request_entries(4)
local me = lease ~= '' and lease or holder
local now = now_ms()

-- state[i]: my_shared_hold's answer for a shared key (1 or 2: the lease
-- is its one holder, whose expiry is the key's; a table; or false),
-- read_holders's for a permit (false when not ours).
local state = {}
local lost = {}
for i = first, last do
  local k, st = keys[i], false
  if permits then
    st = read_holders(k, me, now)
    st = st.mine and st
  else
    st = my_shared_hold(k, me, now)
  end
  state[i] = st
  if not st then
    lost[#lost + 1] = i - first + 1
  end
end
if #lost > 0 then
  return lost
end
local exp = string.format('%d', now + ttl)
for i = first, last do
  local k, st = keys[i], state[i]
  if type(st) == 'number' then
    redis.call('PEXPIRE', k, ttl) -- the one holder: its expiry is the key's
  elseif permits then
    prune(k, st.dead)
    redis.call('HSET', k, me, string.format('%d', st.mine) .. ':' .. exp)
    later_expiry(k, ttl)
  else
    local s = companion(k, 's')
    redis.call('ZADD', s, exp, me)
    redis.call('ZREMRANGEBYSCORE', s, '-inf', '(' .. string.format('%d', now)) -- crashed holders
    later_expiry(s, ttl)
    later_expiry(k, ttl)
  end
end
return lost
