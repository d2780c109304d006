-- slot_claim: a slot host process takes charge of a started slot (PREPARING_PAGE). A slot runs in one
-- process only: the claim is refused while another owner's heartbeat is fresh (a redelivered host task).
-- KEYS[1] slot (the slot record, hash)
-- ARGV[1] owner (token)   ARGV[2] worker (the slot host's Celery node name)   ARGV[3] process_id   ARGV[4] stale_after_seconds (s): a heartbeat
--   older than this is stale
-- Returns {status, state, country}: status ok | missing | not_started | owned
local slot_key = KEYS[1]
local owner, worker, process_id, stale_after = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = server_now()
local record = redis.call('HMGET', slot_key, 'state', 'owner', 'heartbeat', 'country')
local state, current_owner, heartbeat, country = record[1], record[2] or '', tonumber(record[3] or '') or 0, record[4]
if not state then return {'missing', '', ''} end
if state ~= 'PREPARING_PAGE' then return {'not_started', state, country} end
if current_owner ~= '' and current_owner ~= owner and now - heartbeat < stale_after then return {'owned', state, country} end
redis.call('HSET', slot_key, 'owner', owner, 'worker', worker, 'process_id', process_id, 'heartbeat', fmt(now),
  'browser_pid', '', 'consecutive_failures', 0)
return {'ok', state, country}
