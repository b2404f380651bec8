// What both pages share: the server's token, kept for this tab only (sessionStorage) and sent as a header, never
// in a URL; calls to the server's routes with their one-line refusals; and a reader of server-sent events over
// fetch (EventSource cannot POST a question).

const TOKEN = "dspy-rag.token";

/** Keeps the token typed into `input` for this tab; `changed` is called once it is entered. */
export function tokenField(input, changed = () => {}) {
  input.value = sessionStorage.getItem(TOKEN) ?? "";
  input.addEventListener("input", () => {
    if (input.value) sessionStorage.setItem(TOKEN, input.value);
    else sessionStorage.removeItem(TOKEN);
  });
  input.addEventListener("change", changed);
}

function headers(extra) {
  const token = sessionStorage.getItem(TOKEN);
  return token ? { ...extra, authorization: `Bearer ${token}` } : extra;
}

/** A request the server refused: its status and its one-line reason. */
export class Refused extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function refusal(response) {
  if (response.status === 401) return new Refused(401, "this server needs its token (serve.token): enter it above");
  let reason = `${response.status} ${response.statusText}`;
  try {
    reason = (await response.json()).error ?? reason;
  } catch {
    // not the server's JSON (a proxy's page): the status says enough
  }
  return new Refused(response.status, reason);
}

async function call(path, options) {
  const response = await fetch(path, options);
  if (!response.ok) throw await refusal(response);
  return response;
}

/** The JSON a GET route answers. */
export async function getJson(path) {
  return (await call(path, { headers: headers({ accept: "application/json" }) })).json();
}

/** The (kind, data) events of a POST that streams server-sent events; `signal` aborts it. */
export async function* postEvents(path, body, signal) {
  const response = await call(path, {
    method: "POST", body: JSON.stringify(body), signal,
    headers: headers({ "content-type": "application/json", accept: "text/event-stream" }),
  });
  yield* serverEvents(response.body.pipeThrough(new TextDecoderStream()));
}

/** Server-sent events from a stream of text: `event:` names the kind, `data:` lines carry JSON, a blank line ends
 * an event, a line starting with a colon is a comment. */
async function* serverEvents(text) {
  const reader = text.getReader();
  let buffer = "", kind = "message", data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      const lines = (buffer + value).split(/\r?\n/);
      buffer = lines.pop();  // a line not yet ended: the next chunk completes it
      for (const line of lines) {
        if (line === "") {
          if (data.length) yield { kind, data: JSON.parse(data.join("\n")) };
          kind = "message";
          data = [];
        } else if (!line.startsWith(":")) {
          const [field, ...rest] = line.split(":");
          const value = rest.join(":").replace(/^ /, "");
          if (field === "event") kind = value;
          else if (field === "data") data.push(value);
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});  // a reader that stops early closes the stream, which cancels the run
  }
}
