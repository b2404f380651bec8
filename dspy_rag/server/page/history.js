// The history view: the metric across recompiles, one line per artifact lineage, drawn as an inline SVG from
// GET /v1/history (what `dspy-rag history` shows; x 0 is the uncompiled program's score).

import { getJson, tokenField } from "./client.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 720, HEIGHT = 360, LEFT = 56, RIGHT = 170, TOP = 16, BOTTOM = 44;
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
const plot = document.querySelector("#plot");
const status = document.querySelector("#ledger");

function svg(tag, attributes, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** The score range shown: the scores', widened to tenths, never empty. */
function range(scores) {
  let low = Math.floor(Math.min(...scores) * 10) / 10, high = Math.ceil(Math.max(...scores) * 10) / 10;
  if (high - low < 0.1) [low, high] = [Math.max(0, low - 0.1), high + 0.1];
  return [low, high];
}

function draw(lineages, metric) {
  const steps = Math.max(1, ...lineages.flatMap((l) => l.points.map(([x]) => x)));
  const [low, high] = range(lineages.flatMap((l) => l.points.map(([, y]) => y)));
  const x = (step) => LEFT + (step / steps) * (WIDTH - LEFT - RIGHT);
  const y = (score) => HEIGHT - BOTTOM - ((score - low) / (high - low)) * (HEIGHT - TOP - BOTTOM);
  const chart = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": `${metric} across recompiles` });
  chart.append(svg("line", { x1: LEFT, y1: y(low), x2: x(steps), y2: y(low), class: "axis" }),
               svg("line", { x1: LEFT, y1: y(low), x2: LEFT, y2: y(high), class: "axis" }));
  for (let step = 0; step <= steps; step += Math.ceil(steps / 10)) {
    chart.append(svg("text", { x: x(step), y: HEIGHT - BOTTOM + 18, class: "tick x" }, String(step)));
  }
  for (let n = 0; n <= 5; n += 1) {
    const score = low + ((high - low) * n) / 5;
    chart.append(svg("line", { x1: LEFT, y1: y(score), x2: x(steps), y2: y(score), class: "grid" }),
                 svg("text", { x: LEFT - 8, y: y(score) + 4, class: "tick y" }, score.toFixed(2)));
  }
  chart.append(svg("text", { x: (LEFT + x(steps)) / 2, y: HEIGHT - 8, class: "label" }, "recompile (0 = uncompiled)"),
               svg("text", { x: 14, y: (TOP + HEIGHT - BOTTOM) / 2, class: "label",
                             transform: `rotate(-90 14 ${(TOP + HEIGHT - BOTTOM) / 2})` }, metric));
  lineages.forEach((lineage, n) => {
    const colour = COLOURS[n % COLOURS.length];
    const line = svg("g", { class: "lineage", "data-lineage": lineage.lineage, stroke: colour, fill: colour });
    line.append(svg("polyline", { points: lineage.points.map(([s, v]) => `${x(s)},${y(v)}`).join(" "), fill: "none" }));
    for (const [s, v] of lineage.points) {
      const point = svg("circle", { cx: x(s), cy: y(v), r: 4, class: "point" });
      point.append(svg("title", {}, `${lineage.lineage}: recompile ${s}, ${metric} ${v.toFixed(3)}`));
      line.append(point);
    }
    const key = TOP + 8 + n * 20;
    line.append(svg("line", { x1: WIDTH - RIGHT + 16, y1: key, x2: WIDTH - RIGHT + 36, y2: key }),
                svg("text", { x: WIDTH - RIGHT + 42, y: key + 4, class: "key", stroke: "none" }, lineage.lineage));
    chart.append(line);
  });
  return chart;
}

async function load() {
  status.classList.remove("error");
  try {
    const report = await getJson("/v1/history");
    const drawn = report.lineages.filter((lineage) => lineage.points.length);
    if (!drawn.length) {
      plot.replaceChildren();
      status.textContent = `The ledger ${report.ledger} holds no compiles yet: \`dspy-rag compile …\` adds one.`;
      return;
    }
    const metrics = new Set(drawn.flatMap((l) => l.rows.filter((r) => r.kind === "compile").map((r) => r.metric)));
    plot.replaceChildren(draw(drawn, [...metrics].join(", ")));
    status.textContent = `${drawn.length} lineage${drawn.length > 1 ? "s" : ""} from the ledger ${report.ledger}`;
  } catch (error) {
    plot.replaceChildren();
    status.textContent = error.message;
    status.classList.add("error");
  }
}

tokenField(document.querySelector("#token"), load);
load();
