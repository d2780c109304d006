-- lend_places: a batch's requests have waited past slow_request_lend_seconds for their site (a slow host, a
-- connect or first-byte timeout on its way): each lends its source's max_active place back, so admission may
-- start another task in it while the request goes on. The request keeps everything else: its lease, its token,
-- its host's place (per_host_max_active still counts it, so the site sees no more requests in flight than it
-- allows) and its per_minute token. Only a source with a per-host limit lends (its politeness is per host: one
-- slow site then holds one place of its own, not the source's); without one, max_active is the only bound a
-- single site's requests meet, and nothing is lent. Lent places are at most twice max_active (so the source's
-- requests in flight are at most three times max_active: a broad source's slow hosts, 5 % of them answering after
-- 10 s, have about 1.5 max_active requests waiting at once). A lease is lent once; drop_lease (common.lua) takes it back with the
-- lease, whatever ends it (release, fail, reap, a lost worker, a chain's next page).
-- KEYS[1] active   KEYS[2] leases   KEYS[3] lent_places   KEYS[4] config
-- ARGV[1] now (s) or ""   ARGV[2..] leases (task id, token, ...: the slow requests' tasks)
-- Returns {lends (1 when the source lends at all, 0 without a per-host limit), lent_total (count of the source's
--          places lent now), lent... (task ids this call lent)}
local now = now_or_server(ARGV[1])
local limits = redis.call('HMGET', KEYS[4], 'max_active', 'per_host_max_active')
local max_active, per_host = tonumber(limits[1]), tonumber(limits[2]) or 0
if not max_active or per_host <= 0 then return {0, redis.call('ZCARD', KEYS[3])} end
local lent, total = {}, redis.call('ZCARD', KEYS[3])
for i = 2, #ARGV - 1, 2 do
  if total >= 2 * max_active then break end
  local held, state = holds(KEYS[2], ARGV[i], ARGV[i + 1])
  local deadline = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i]) or '0')
  if held and state == 's' and deadline > now and redis.call('ZADD', KEYS[3], 'NX', now, ARGV[i]) == 1 then
    lent[#lent + 1] = ARGV[i]
    total = total + 1
  end
end
table.insert(lent, 1, total)
table.insert(lent, 1, 1)
return lent
