-- release one lock key, owner-checked: delete it only while it still holds
-- the caller's token, so that a lock that expired and was taken by someone
-- else is left alone. Returns 1 when deleted, 0 when the key was not ours.
--
-- KEYS[1] the lock key
-- ARGV[1] the owner token
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
