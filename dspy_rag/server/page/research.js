// The research view: a question asked of POST /v1/research, its steps listed as the server streams them, then
// the answer (answer.js). A new question ends the run of the last one: closing its stream cancels it.

import { postEvents, tokenField } from "./client.js";
import { AnswerView } from "./answer.js";

const form = document.querySelector("#ask");
const steps = document.querySelector("#steps");
const status = document.querySelector("#status");
const answer = new AnswerView(document.querySelector("#answer"), document.querySelector("#passage"));
let running = null;  // the AbortController of the run under way

tokenField(document.querySelector("#token"));

function say(text, failed = false) {
  status.textContent = text;
  status.classList.toggle("error", failed);
}

function step(kind, data) {
  const item = document.createElement("li");
  item.className = "step";
  item.dataset.kind = kind;
  const name = Object.assign(document.createElement("span"), { className: "kind", textContent: kind });
  const text = kind === "queued" ? `waiting for the model: number ${data.position} in line` : data.text;
  item.append(name, " ", text);
  steps.append(item);
  item.scrollIntoView({ block: "nearest" });
}

async function research(body, controller) {
  for await (const { kind, data } of postEvents("/v1/research", body, controller.signal)) {
    if (kind === "answer") {
      answer.show(data);
      return say(`answered in ${data.seconds} s with ${data.lm_calls} model calls`);
    } else if (kind === "error") {
      return say(data.error, true);
    } else if (kind === "token") {
      answer.addToken(data.text);
    } else if (kind !== "run") {
      step(kind, data);
    }
  }
  say("the stream ended before the answer; ask again", true);
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  running?.abort();
  const controller = (running = new AbortController());
  steps.replaceChildren();
  answer.clear();
  say("researching…");
  const body = { question: form.elements.question.value, pipeline: form.elements.pipeline.value };
  try {
    await research(body, controller);
  } catch (error) {
    if (error.name !== "AbortError") say(error.message, true);
  } finally {
    if (running === controller) running = null;
  }
});
