-- slot_heartbeat: the owning process says it is alive and learns its orders.
-- KEYS[1] slot (the slot record, hash; heartbeat: the server time (s))
-- ARGV[1] owner (token)   ARGV[2] browser_pid ('' = no browser open)
-- Returns {status, state, country, retire ('1' = delete me after this task), next_country ('' = stay)}:
--   status ok | missing | not_owner (the slot was reset or handed to another process: stop)
local slot_key = KEYS[1]
local owner, browser_pid = ARGV[1], ARGV[2]
local record = redis.call('HMGET', slot_key, 'state', 'owner', 'country', 'retire', 'next_country')
if not record[1] then return {'missing', '', '', '0', ''} end
if (record[2] or '') ~= owner then return {'not_owner', record[1], record[3], record[4] or '0', record[5] or ''} end
redis.call('HSET', slot_key, 'heartbeat', fmt(server_now()), 'browser_pid', browser_pid)
return {'ok', record[1], record[3], record[4] or '0', record[5] or ''}
