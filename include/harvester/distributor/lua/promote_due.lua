-- promote_due: retries whose backoff is over move from the delayed set to the front of intake (they are
-- older work), and the wait until the next one is due. The store calls it right before a source's
-- admission, in the same round trip, so admission itself never touches the delayed set.
-- KEYS[1] delayed   zset message -> due time (s)
-- KEYS[2] intake    list of JSON task messages
-- ARGV[1] now (s) or "" for server TIME   ARGV[2] limit (count of retries moved at most)
-- Returns {promoted (count), next_due_seconds (s until the earliest retry still delayed, "-1" = none)}
local now = now_or_server(ARGV[1])
local promoted = promote_due(KEYS[1], KEYS[2], now, tonumber(ARGV[2]))
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first == 0 then return {promoted, '-1'} end
return {promoted, string.format('%.6f', math.max(0, tonumber(first[2]) - now))}
