-- archived_digests: a Bloom filter of a source's archived payload digests (harvester.storage.archive_digests):
-- every digest given is marked archived, and the reply says which of them were (maybe) archived before. A
-- digest's positions: its first two 32-bit words a and b (b made odd), bit 1 + (a + i * b) mod (bits - 1) for
-- i = 0..hashes-1 (below 2^53: exact in Lua's numbers). Bit 0 says the filter holds the whole index. No times.
-- KEYS[1] archived_digests (string: the bitmap)
-- ARGV[1] bits (count of the filter's bits)   ARGV[2] hashes (count of bits a digest sets)
-- ARGV[3] digests (the SHA-1s in hex, 40 characters each, concatenated)
-- ARGV[4] mark_built ("1": set bit 0 once the digests are in: a build from the index has put them all)
-- Returns {built (1 when bit 0 was set before this call), seen (one character per digest: "1" maybe archived)}
local span = tonumber(ARGV[1]) - 1
local hashes = tonumber(ARGV[2])
local digests = ARGV[3]
local built = redis.call('GETBIT', KEYS[1], 0)
local seen = {}
for start = 1, #digests - 39, 40 do
  local a = tonumber(string.sub(digests, start, start + 7), 16)
  local b = tonumber(string.sub(digests, start + 8, start + 15), 16)
  if b % 2 == 0 then b = b + 1 end
  local all = '1'
  for i = 0, hashes - 1 do
    if redis.call('SETBIT', KEYS[1], 1 + (a + i * b) % span, 1) == 0 then all = '0' end
  end
  seen[#seen + 1] = all
end
if ARGV[4] == '1' then
  redis.call('SETBIT', KEYS[1], 0, 1)
end
return {built, table.concat(seen)}
