-- slot_reset_stale: a slot whose process stopped heartbeating is reset to NO_PAGE (its running task comes
-- back by its lease). "Stale" = not NO_PAGE and no heartbeat for ARGV[1] s; a slot never claimed (no heartbeat
-- yet: its hosting task still waits for a free worker process) is stale only ARGV[4] s after its last change.
-- KEYS[1] all_slots (set)
-- ARGV[1] stale_after_seconds (s)   ARGV[2] slot_prefix (slot key prefix)   ARGV[3] country_prefix (country index)
-- ARGV[4] unclaimed_after_seconds (s)
-- Returns {reset_slots... (flat: slot id, previous state, worker, process id, browser pid, outcome per reset slot)}
local all_slots = KEYS[1]
local stale_after, slot_prefix, country_prefix = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local unclaimed_after = tonumber(ARGV[4])
local now = server_now()
local reply = {}
for _, id in ipairs(redis.call('SMEMBERS', all_slots)) do
  local slot_key = slot_prefix .. id
  local record = redis.call('HMGET', slot_key, 'state', 'heartbeat', 'state_since', 'worker', 'process_id', 'browser_pid')
  local state = record[1]
  if not state then
    redis.call('SREM', all_slots, id)
  elseif state ~= 'NO_PAGE' then
    local beat = tonumber(record[2] or '')
    local seen = math.max(beat or 0, tonumber(record[3] or '') or 0)
    if now - seen > (beat and stale_after or unclaimed_after) then
      local outcome = land_in_no_page(slot_key, all_slots, country_prefix, id, now)
      if outcome ~= 'deleted' then redis.call('HSET', slot_key, 'reason', 'slot process stopped heartbeating') end
      for _, value in ipairs({id, state, record[4] or '', record[5] or '', record[6] or '', outcome}) do
        reply[#reply + 1] = value
      end
    end
  end
end
return reply
