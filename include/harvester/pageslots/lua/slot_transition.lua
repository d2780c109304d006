-- slot_transition: move one slot to another state, atomically, only along the legal transitions.
-- KEYS[1] slot (the slot record, hash)   KEYS[2] all_slots (set)
-- ARGV[1] slot_id   ARGV[2] target (state)   ARGV[3] owner (token; '' = the allocator's jobs, which may act on
--   any slot; a host passes its token and is refused on a slot another process owns)
-- ARGV[4] country_prefix (country index key prefix)   ARGV[5] required (current state, '' = any legal one)
-- ARGV[6] min_idle_seconds (s since last_used, '' = none; idle closing)   ARGV[7] reason ('' keeps it)
-- ARGV[8..] fields (field/value pairs to set; a value '+N' adds N to the field, pages_served '+1')
-- Returns {status, previous (state), outcome}: status ok | illegal | not_owner | missing | not_in_state | not_idle;
--   outcome is the new state, or 'deleted'/'moved' when the slot landed in NO_PAGE with such an order.
local slot_key, all_slots = KEYS[1], KEYS[2]
local id, target, owner, country_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local required, min_idle, reason = ARGV[5], ARGV[6], ARGV[7]
local now = server_now()
local record = redis.call('HMGET', slot_key, 'state', 'owner', 'last_used')
local state = record[1]
if not state then return {'missing', '', ''} end
if not LEGAL[state][target] then return {'illegal', state, state} end
if owner ~= '' and (record[2] or '') ~= owner then return {'not_owner', state, state} end
if required ~= '' and state ~= required then return {'not_in_state', state, state} end
if min_idle ~= '' and now - tonumber(record[3] or '0') < tonumber(min_idle) then return {'not_idle', state, state} end
for i = 8, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  if string.sub(value, 1, 1) == '+' then
    redis.call('HINCRBY', slot_key, field, tonumber(string.sub(value, 2)))
  else
    redis.call('HSET', slot_key, field, value)
  end
end
if reason ~= '' then redis.call('HSET', slot_key, 'reason', reason) end
if target == 'PAGE_READY' or target == 'RUNNING_SCRAPING_TASK' then redis.call('HSET', slot_key, 'last_used', fmt(now)) end
if target ~= 'RUNNING_SCRAPING_TASK' then redis.call('HSET', slot_key, 'task', '') end
if target == 'NO_PAGE' then return {'ok', state, land_in_no_page(slot_key, all_slots, country_prefix, id, now)} end
redis.call('HSET', slot_key, 'state', target, 'state_since', fmt(now))
return {'ok', state, target}
