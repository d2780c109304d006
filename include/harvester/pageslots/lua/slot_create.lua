-- slot_create: create ARGV[2] slot records of country ARGV[1], all in NO_PAGE with no process.
-- KEYS[1] all_slots (set of ids)   KEYS[2] slot_sequence (counter)   KEYS[3] country_slots (the country's ids, set)
-- ARGV[1] country   ARGV[2] count (of slots to create)   ARGV[3] slot_prefix (slot key = prefix .. id); no times
-- Returns {slot_ids... (the new slot ids)}
local all_slots, sequence, country_slots = KEYS[1], KEYS[2], KEYS[3]
local country, count, slot_prefix = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = server_now()
local ids = {}
for _ = 1, count do
  local id = country .. '-' .. redis.call('INCR', sequence)
  redis.call('HSET', slot_prefix .. id, 'id', id, 'country', country, 'state', 'NO_PAGE', 'worker', '',
    'process_id', '', 'browser_pid', '', 'owner', '', 'task', '', 'pages_served', 0,
    'consecutive_failures', 0, 'last_used', fmt(now), 'heartbeat', '', 'created_at', fmt(now),
    'state_since', fmt(now), 'retire', '0', 'next_country', '', 'reason', '')
  redis.call('SADD', all_slots, id)
  redis.call('SADD', country_slots, id)
  ids[#ids + 1] = id
end
return ids
