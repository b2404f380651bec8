// The answer as the page shows it: the short answer, then the cited answer with each citation a button that opens
// the passage it cites, the sentences no cited passage supports marked, and the sources. While the answer's tokens
// stream in (`token` events), a draft stands in its place.

import { getJson } from "./client.js";

const SENTENCE_END = /(?<=[.!?])\s+(?=[A-Z"'(])/g;  // where dspy_rag.citations.sentences splits an answer
const WEB = /^https?:\/\//;

const element = (tag, className, text) => Object.assign(document.createElement(tag), { className, textContent: text ?? "" });

/** The text between citations as the citation check wrote the sentence: spaces closed up before punctuation. */
const plain = (text) => text.split(/\s+/).join(" ").replace(/\s+([.,;:!?])/g, "$1").trim();

/** The answer's sentences, each a list of its pieces: text (`{text}`) and citations (`{label}`). A label may hold
 * a full stop ("Item 7. Management's Discussion"), so citations are cut out before the text is cut at sentence ends. */
function sentences(answer, labels) {
  const escaped = [...labels].sort((a, b) => b.length - a.length).map((l) => l.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  const marker = new RegExp(escaped.length ? `\\[(${escaped.join("|")})\\]` : "(?!)", "g");
  const all = [[]];
  const addText = (part) => part.split(SENTENCE_END).forEach((text, n) => {
    if (n) all.push([]);
    all.at(-1).push({ text });
  });
  let at = 0;
  for (const found of answer.matchAll(marker)) {
    addText(answer.slice(at, found.index));
    all.at(-1).push({ label: found[1] });
    at = found.index + found[0].length;
  }
  addText(answer.slice(at));
  return all.filter((sentence) => sentence.some((piece) => piece.label || piece.text.trim()));
}

export class AnswerView {
  constructor(root, passage) {
    this.root = root;
    this.passage = passage;
  }

  clear() {
    this.root.replaceChildren();
    this.passage.replaceChildren();
    this.draft = null;
  }

  /** A token of the answer being written. */
  addToken(text) {
    if (!this.draft) this.root.replaceChildren(this.draft = element("p", "draft"));
    this.draft.textContent += text;
  }

  /** The finished answer: the document `ask --json` prints. */
  show(doc) {
    this.draft = null;
    const cited = Map.groupBy(doc.citations, (citation) => citation.label);
    const flagged = new Map(doc.flagged.map((flag) => [plain(flag.sentence), flag.reason]));
    const body = element("p", "answer");
    for (const sentence of sentences(doc.answer, cited.keys())) {
      const reason = flagged.get(plain(sentence.map((piece) => piece.text ?? "").join("")));
      const holder = reason ? Object.assign(element("mark", "flagged"), { title: `unsupported: ${reason}` }) : body;
      for (const piece of sentence) {
        holder.append(piece.label ? this.citation(piece.label, cited.get(piece.label)) : piece.text);
      }
      if (holder !== body) body.append(holder);
      body.append(" ");
    }
    const parts = [element("h2", "", "Answer"), element("p", "short", doc.short_answer), body];
    if (doc.flagged.length) {
      const list = element("ul", "flags");
      for (const flag of doc.flagged) list.append(element("li", "", `${flag.sentence} (${flag.reason})`));
      parts.push(element("h3", "", "Unsupported sentences"), list);
    }
    if (doc.citations.length) {
      const list = element("ul", "sources");
      for (const [label, citations] of cited) {
        const item = element("li");
        item.append(this.citation(label, citations), ` ${citations.map((c) => c.source).join(", ")}`);
        list.append(item);
      }
      parts.push(element("h3", "", "Sources"), list);
    }
    this.root.replaceChildren(...parts);
  }

  citation(label, citations) {
    const button = element("button", "citation", `[${label}]`);
    button.type = "button";
    button.addEventListener("click", () => this.open(label, citations));
    return button;
  }

  /** The passages a citation names (several chunks may share a section's label), fetched from the index. */
  async open(label, citations) {
    this.passage.replaceChildren(element("h2", "", `Passage cited as [${label}]`));
    for (const citation of citations) {
      const shown = element("article", "passage");
      this.passage.append(shown);
      if (citation.chunk_id.startsWith("web-")) {  // a web result: the server keeps its address, not its text
        const link = element("a", "", citation.source);
        if (WEB.test(citation.source)) Object.assign(link, { href: citation.source, rel: "noreferrer", target: "_blank" });
        shown.append(element("p", "where", "a web page, whose text the server does not keep: "), link);
        continue;
      }
      try {
        const found = await getJson(`/v1/passages/${encodeURIComponent(citation.chunk_id)}`);
        shown.append(element("p", "section", found.section), element("p", "where", found.source),
                     element("blockquote", "text", found.text));
      } catch (error) {
        shown.append(element("p", "error", error.message));
      }
    }
  }
}
