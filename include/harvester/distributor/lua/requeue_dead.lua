-- requeue_dead: move up to ARGV[1] dead letters of one source back to intake with attempt 0.
-- Entries whose message is not a JSON object (malformed input) stay in dead letters.
-- KEYS[1] dead_letters   KEYS[2] intake   KEYS[3] run_dead
-- ARGV[1] limit (count: at most this many entries, -1 = all)
-- Returns {requeued (count), kept (count of malformed entries left)}
local limit = tonumber(ARGV[1])
local total = redis.call('LLEN', KEYS[1])
if limit < 0 or limit > total then limit = total end
local requeued, kept = 0, {}
for _ = 1, limit do
  local raw = redis.call('LPOP', KEYS[1])
  if not raw then break end
  local ok, entry = pcall(cjson.decode, raw)
  local message = ok and type(entry) == 'table' and entry['message'] or nil
  if type(message) == 'table' then
    message['attempt'] = 0
    redis.call('RPUSH', KEYS[2], cjson.encode(message))
    local run_id = message['run_id']
    if type(run_id) == 'string' then
      redis.call('HINCRBY', KEYS[3], run_id, -1)
      if type(message['package_id']) == 'number' then
        redis.call('HINCRBY', KEYS[3], run_id .. '|' .. string.format('%d', message['package_id']), -1)
      end
    end
    requeued = requeued + 1
  else
    kept[#kept + 1] = raw
  end
end
for i = #kept, 1, -1 do redis.call('LPUSH', KEYS[1], kept[i]) end
return {requeued, #kept}
