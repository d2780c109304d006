-- common: helpers every page-slot script starts with (prefixed to each by harvester.redis_scripts).
-- Times are the Redis server's clock (TIME), in seconds with microseconds, so hosts never disagree.
-- Slot keys are built from ids with the shared {pageslots} hash tag, so they stay in one cluster slot.

local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function fmt(number) return string.format('%.6f', number) end

-- The state machine of DESIGN.md section 5: NO_PAGE -> PREPARING_PAGE -> PAGE_READY <-> RUNNING_SCRAPING_TASK
-- -> CLOSING_PAGE -> NO_PAGE. PREPARING_PAGE -> PREPARING_PAGE re-opens the page after a failed load,
-- PREPARING_PAGE -> NO_PAGE gives up (the 7th consecutive failure), RUNNING_SCRAPING_TASK -> PREPARING_PAGE
-- re-opens the page when a task's load failed, PAGE_READY -> CLOSING_PAGE is idle closing (or a slot
-- moved or deleted), RUNNING_SCRAPING_TASK -> CLOSING_PAGE a blocked task.
local LEGAL = {
  NO_PAGE = {PREPARING_PAGE = true},
  PREPARING_PAGE = {PREPARING_PAGE = true, PAGE_READY = true, NO_PAGE = true},
  PAGE_READY = {RUNNING_SCRAPING_TASK = true, CLOSING_PAGE = true},
  RUNNING_SCRAPING_TASK = {PAGE_READY = true, CLOSING_PAGE = true, PREPARING_PAGE = true},
  CLOSING_PAGE = {NO_PAGE = true},
}

-- A slot that reaches NO_PAGE loses its process; a slot marked for deletion is deleted, a slot marked
-- to move takes its new country. Returns 'NO_PAGE', 'deleted' or 'moved'.
local function land_in_no_page(slot_key, all_slots, country_prefix, id, now)
  local record = redis.call('HMGET', slot_key, 'country', 'retire', 'next_country')
  local country, retire, next_country = record[1] or '', record[2] or '0', record[3] or ''
  if retire == '1' then
    redis.call('DEL', slot_key)
    redis.call('SREM', all_slots, id)
    redis.call('SREM', country_prefix .. country, id)
    return 'deleted'
  end
  redis.call('HSET', slot_key, 'state', 'NO_PAGE', 'worker', '', 'process_id', '', 'browser_pid', '',
    'owner', '', 'task', '', 'state_since', fmt(now), 'consecutive_failures', 0)
  if next_country ~= '' and next_country ~= country then
    redis.call('SREM', country_prefix .. country, id)
    redis.call('SADD', country_prefix .. next_country, id)
    redis.call('HSET', slot_key, 'country', next_country, 'next_country', '')
    return 'moved'
  end
  redis.call('HSET', slot_key, 'next_country', '')
  return 'NO_PAGE'
end

-- A site host's proxy tier now (proxy_tier_choose, proxy_tier_block): the cheapest tier it has not blocked us on
-- within that tier's quiet period (its '|hot:<tier>' time still ahead), else the top one; a move is counted
-- ('|moves_up', '|moves_down') and kept ('|tier', '|since'). Tiers are indexes, 0 the cheapest.
local function proxy_tier_now(key, host, count, now)
  local tier = count - 1
  for index = 0, count - 1 do
    if tonumber(redis.call('HGET', key, host .. '|hot:' .. index) or '0') <= now then
      tier = index
      break
    end
  end
  local was = tonumber(redis.call('HGET', key, host .. '|tier') or '0')
  if tier ~= was then
    redis.call('HINCRBY', key, host .. (tier > was and '|moves_up' or '|moves_down'), 1)
    redis.call('HSET', key, host .. '|tier', tier, host .. '|since', fmt(now))
  end
  return tier
end
