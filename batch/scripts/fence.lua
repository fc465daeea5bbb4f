-- Fencing tokens that survive a failover (docs/safety.md, "Fencing across
-- failover"). Only acquire.lua uses this file.
--
-- A slot's counter P{T}#fence holds the last token drawn in the slot. A
-- token is epoch * 2^32 + n, 1 <= n < 2^32, where epoch is the config epoch
-- of a master that served the slot: the next token is the counter + 1, or
-- epoch * 2^32 + 1 when the counter is below that, epoch being the config
-- epoch of the master running the script (cluster_my_epoch of CLUSTER
-- INFO; scripts may run CLUSTER INFO, checked on Redis 7.0.15). The node
-- reads its own epoch, so a client's stale slot map cannot feed it an old
-- one: whichever node runs the script draws with the epoch it has.
--
-- Why this survives asynchronous replication: a replica is promoted with
-- a config epoch above that of every master that served its slots before
-- (Redis's failover election; the same rule decides who owns a slot), so
-- its first token, epoch * 2^32 + 1, is above every token its deposed
-- master drew, whatever counter increments the replica never received;
-- and a deposed master keeps its old epoch until it learns of the
-- promotion (then it stops serving the slot), so whatever it grants in
-- between stays below. n never reaches 2^32 (the draw is refused instead),
-- so the epoch part of a token is always the epoch of a master that
-- served the slot. Tokens stay below 2^53, the largest integer a Lua
-- number (a double) and a Redis integer reply carry exactly, as long as
-- epochs are below 2^21 (larger ones are refused).
local FENCE_SHIFT = 4294967296 -- 2^32
local FENCE_EPOCHS = 2097152 -- 2^21

-- fence_epoch returns the config epoch of this node, or nil and an error
-- reply. A server without cluster mode refuses CLUSTER INFO: its epoch
-- is 0 (it has no failover of its own that could lose increments behind
-- a client's back; a Sentinel failover can, docs/safety.md).
local function fence_epoch()
  local info = redis.pcall('CLUSTER', 'INFO')
  if type(info) == 'table' and info.err then
    if string.find(info.err, 'cluster support disabled', 1, true) then
      return 0
    end
    return nil, redis.error_reply('ERR slotlock fencing: CLUSTER INFO: ' .. info.err)
  end
  local e = tonumber(string.match(info, 'cluster_my_epoch:(%d+)'))
  if not e then
    return nil, redis.error_reply('ERR slotlock fencing: no cluster_my_epoch in CLUSTER INFO')
  end
  if e >= FENCE_EPOCHS then
    return nil, redis.error_reply(string.format(
      'ERR slotlock fencing: config epoch %d is 2^21 or more; tokens would pass 2^53', e))
  end
  return e
end

-- fence_draw returns the next token of counter fk for a master of config
-- epoch e, or nil and an error reply naming fk. It only reads: the caller
-- draws every slot's token before its first write and writes them with
-- fence_store, so a refused draw leaves nothing written.
local function fence_draw(fk, e)
  local r = redis.pcall('GET', fk)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) == 1 then
      return nil, redis.error_reply(r.err .. ' (fencing counter ' .. fk .. ')')
    end
    return nil, r -- a slot this node no longer serves: as it came
  end
  local c = 0
  if r then
    c = tonumber(r)
    if not c or c < 0 or c ~= math.floor(c) or c >= 2 ^ 53 then
      return nil, redis.error_reply('ERR slotlock fencing counter ' .. fk .. ' holds ' .. string.format('%q', string.sub(r, 1, 40)) .. ', not a token')
    end
  end
  local base = e * FENCE_SHIFT
  if c < base then
    c = base
  end
  c = c + 1
  if c % FENCE_SHIFT == 0 then
    return nil, redis.error_reply(string.format(
      'ERR slotlock fencing counter %s: 2^32 tokens drawn under epoch %d; a failover or slot move gives a new one', fk, math.floor(c / FENCE_SHIFT) - 1))
  end
  return c
end

-- fence_store records token f as counter fk's last.
local function fence_store(fk, f)
  redis.call('SET', fk, string.format('%d', f))
end
