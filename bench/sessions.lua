-- wrk script: one GET per request, round-robin over the sessions of a file.
--
-- wrk URL -s sessions.lua -- SESSIONS_FILE MODE CONNECTION PATH [APP_KEY_FILE]
--   SESSIONS_FILE  one session per line: token, subject, contractor, generation, session id
--                  (tab-separated)
--   MODE           "bearer": `Authorization: Bearer <token>` (edge, nginx);
--                  "direct": the app's edge key and identity headers (app reached directly);
--                  "dpop": a bound session and its DPoP proof, one line `token<TAB>proof`
--                  each, every line sent once (a proof is refused the second time): each
--                  thread takes every n-th line
--   CONNECTION     "keep" (keep-alive) or "close" (`Connection: close`: a new connection and
--                  a full TLS handshake per request)
--   PATH           the request path
--   APP_KEY_FILE   with "direct": the file holding the app's edge key; with "dpop": wrk's
--                  thread count (each thread sends its share of the lines, from the first)
--
-- Secrets are read from files, never from the command line. Every request is formatted once
-- in init(); request() only picks the next one.

local requests = {}
local count = 0
local next_index = 0
local threads = 0

-- Numbers the threads (before init), so that in "dpop" mode each sends its own lines.
function setup(thread)
  thread:set("thread_id", threads)
  threads = threads + 1
end

local function read_first_line(path)
  local f = assert(io.open(path, "r"))
  local line = f:read("*l")
  f:close()
  return line
end

function init(args)
  local sessions_file, mode, connection, path, app_key_file =
    args[1], args[2], args[3], args[4], args[5]
  local app_key = nil
  if mode == "direct" then
    app_key = read_first_line(app_key_file)
  end
  if mode == "dpop" then
    local n = 0
    local me = thread_id or 0
    local nthreads = tonumber(app_key_file) or 1
    for line in io.lines(sessions_file) do
      local token, proof = line:match("^([^\t]+)\t([^\t]+)$")
      if token then
        n = n + 1
        -- Lines are dealt to the threads in turn (THREADS is wrk's -t).
        if (n - 1) % nthreads == me then
          local h = {}
          h["Authorization"] = "DPoP " .. token
          h["DPoP"] = proof
          if connection == "close" then
            h["Connection"] = "close"
          end
          count = count + 1
          requests[count] = wrk.format("GET", path, h)
        end
      end
    end
    assert(count > 0, "no proof in " .. sessions_file)
    -- From the first line: every proof once, none replayed before the list runs out.
    next_index = 0
    return
  end
  for line in io.lines(sessions_file) do
    local token, subject, contractor, generation, session =
      line:match("^([^\t]+)\t([^\t]+)\t([^\t]+)\t([^\t]+)\t([^\t]+)$")
    if token then
      local h = {}
      if mode == "direct" then
        h["X-Cellbind-Edge-Key"] = app_key
        h["X-Cellbind-Subject"] = subject
        h["X-Cellbind-Contractor"] = contractor
        h["X-Cellbind-Generation"] = generation
        h["X-Cellbind-Session"] = session
      else
        h["Authorization"] = "Bearer " .. token
      end
      if connection == "close" then
        h["Connection"] = "close"
      end
      count = count + 1
      requests[count] = wrk.format("GET", path, h)
    end
  end
  assert(count > 0, "no session in " .. sessions_file)
  -- Threads start at different places in the list.
  next_index = math.random(count) - 1
end

function request()
  next_index = next_index % count + 1
  return requests[next_index]
end

