-- stats: the numbers of one source, read atomically on the server clock.
-- KEYS[1] intake   KEYS[2] delayed   KEYS[3] active   KEYS[4] window   KEYS[5] counters   KEYS[6] dead_letters
-- KEYS[7] host_parked (count of tasks waiting in their hosts' queues: pending too)
-- ARGV[1] window_seconds (s) the rate window
-- Returns {pending (intake plus the hosts' queues), delayed, active, admitted_last_minute (fetch starts in the window), done, failed,
--          dead_letters_waiting (entries now in the list), admitted (total ever), dead_letters_total (total ever)}
local now = server_now()
local totals = redis.call('HMGET', KEYS[5], 'done', 'failed', 'dead', 'admitted')
return {
  redis.call('LLEN', KEYS[1]) + tonumber(redis.call('GET', KEYS[7]) or '0'),
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('ZCOUNT', KEYS[4], now - tonumber(ARGV[1]), '+inf'),
  tonumber(totals[1] or '0'), tonumber(totals[2] or '0'),
  redis.call('LLEN', KEYS[6]),
  tonumber(totals[4] or '0'), tonumber(totals[3] or '0'),
}
