#!lua flags=allow-cross-slot-keys,allow-oom
-- Prototype of the issue-15 script logic (NOT the library's scripts): the
-- value grammar, the queue, hand-off, the 'r' attempt, release and yield.
-- KEYS[1] routes the call; lock keys travel in ARGV after the header.
-- Token length is fixed (22 in the library; TLEN here for short test tokens).
local TLEN = 4

-- value := held | reserved
--   held     := holder ['.' fence] ['!']
--   reserved := '^' ticket ':' token ':' inbox ['!']
local function marked(v) return string.byte(v, -1) == 33 end
local function holder_of(v)
  local e = string.find(v, '[.!]')
  if e then return string.sub(v, 1, e - 1) end
  return v
end
local function parse(v)
  if string.byte(v, 1) ~= 94 then -- not '^'
    return {res = false, who = holder_of(v), marked = marked(v)}
  end
  local c = string.find(v, ':', 2, true)
  local m = marked(v)
  return {res = true, ticket = string.sub(v, 2, c - 1), who = string.sub(v, c + 1, c + TLEN),
          inbox = string.sub(v, c + TLEN + 2, m and -2 or -1), marked = m}
end
-- tickets compare as (number, token)
local function older(t1, w1, t2, w2)
  local a, b = tonumber(t1), tonumber(t2)
  if a ~= b then return a < b end
  return w1 < w2
end
local function qkey(k) local b = string.find(k, '}', 1, true); return string.sub(k, 1, b) .. '#q' .. string.sub(k, b + 1) end
local function now_ms() local t = redis.call('TIME'); return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end
local function publish(ch, msg) if ch ~= '' then redis.pcall('SPUBLISH', ch, msg) end end
-- entry member: token ' ' deadline_ms ' ' inbox
local function member_parse(m)
  local s1 = string.find(m, ' ', 1, true)
  local s2 = string.find(m, ' ', s1 + 1, true)
  return string.sub(m, 1, s1 - 1), tonumber(string.sub(m, s1 + 1, s2 - 1)), string.sub(m, s2 + 1)
end
local function find_entry(q, ticket, token)
  for _, m in ipairs(redis.call('ZRANGE', q, ticket, ticket, 'BYSCORE')) do
    if string.sub(m, 1, TLEN) == token then return m end
  end
  return nil
end
-- enqueue keeps the invariant: a key whose queue is not empty is marked
local function enqueue(k, q, ticket, token, inbox, ce, now)
  local v = redis.call('GET', k)
  if v and not marked(v) then redis.call('SET', k, v .. '!', 'KEEPTTL') end
  local old = find_entry(q, ticket, token)
  if old then redis.call('ZREM', q, old) end
  redis.call('ZADD', q, ticket, token .. ' ' .. string.format('%d', now + ce) .. ' ' .. inbox)
  if redis.call('PTTL', q) < 2 * ce then redis.call('PEXPIRE', q, 2 * ce) end
end
-- head: the oldest live entry, dropping expired ones
local function head(q, now)
  while true do
    local r = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
    if #r == 0 then return nil end
    local tok, dl, inbox = member_parse(r[1])
    if dl >= now then return {member = r[1], ticket = r[2], token = tok, inbox = inbox} end
    redis.call('ZREM', q, r[1])
  end
end
-- hand_off: the key's owner gave it up (inside the owner's own script)
local function hand_off(k, R, now)
  local q = qkey(k)
  local h = head(q, now)
  if not h then
    redis.call('DEL', k)
    redis.call('DEL', q)
    publish(k, 'r')
    return 'free'
  end
  redis.call('ZREM', q, h.member)
  local more = redis.call('ZCARD', q) > 0
  redis.call('SET', k, '^' .. h.ticket .. ':' .. h.token .. ':' .. h.inbox .. (more and '!' or ''), 'PX', R)
  publish(h.inbox ~= '' and h.inbox or k, 'h ' .. k .. ' ' .. h.token)
  return 'to ' .. h.token
end

local op = ARGV[1]
local out = {}
if op == 'r' then
  -- 'r' attempt: ARGV token ticket inbox R CE keys...
  local token, ticket, inbox, R, CE = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
  local now = now_ms()
  local vals = {}
  for i = 7, #ARGV do vals[i] = redis.call('GET', ARGV[i]) or false end -- read phase
  for i = 7, #ARGV do
    local k, v = ARGV[i], vals[i]
    local mark = ''
    if v and marked(v) then mark = '!' end
    if not v then
      redis.call('SET', k, '^' .. ticket .. ':' .. token .. ':' .. inbox, 'PX', R)
      out[#out + 1] = k .. ' reserved(free)'
    else
      local p = parse(v)
      if p.who == token then
        redis.call('SET', k, '^' .. ticket .. ':' .. token .. ':' .. inbox .. mark, 'PX', R)
        out[#out + 1] = k .. ' mine'
      else
        enqueue(k, qkey(k), ticket, token, inbox, CE, now)
        if p.res and older(ticket, token, p.ticket, p.who) then
          publish(p.inbox ~= '' and p.inbox or k, 'y ' .. k .. ' ' .. p.who)
          out[#out + 1] = k .. ' queued, yield requested from ' .. p.who
        else
          out[#out + 1] = k .. ' queued behind ' .. p.who
        end
      end
    end
  end
  out[#out + 1] = 'time ' .. now
elseif op == 'rel' or op == 'y' then
  -- release (owner-checked, held or reserved form) / yield (reserved only,
  -- and re-enqueue): ARGV token R ticket inbox CE keys...
  local token, R, ticket, inbox, CE = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], tonumber(ARGV[6])
  local now = now_ms()
  local mine = {}
  for i = 7, #ARGV do
    local v = redis.call('GET', ARGV[i])
    if v and parse(v).who == token and (op == 'rel' or parse(v).res) then mine[i] = v end
    redis.call('EXISTS', qkey(ARGV[i])) -- touch every key the write phase may write
  end
  for i = 7, #ARGV do
    local v = mine[i]
    if v then
      if marked(v) or op == 'y' then
        out[#out + 1] = ARGV[i] .. ' ' .. hand_off(ARGV[i], R, now)
      else
        redis.call('DEL', ARGV[i]); out[#out + 1] = ARGV[i] .. ' deleted'
      end
      if op == 'y' then enqueue(ARGV[i], qkey(ARGV[i]), ticket, token, inbox, CE, now) end
    else
      out[#out + 1] = ARGV[i] .. ' not mine'
    end
  end
end
return out
