// Member lists folded for reading: a process group's "[0, 1, ..., 63]" reads "(64 ranks: 0-63)".

/** Ranks as runs of consecutive numbers: [0, 1, 2, 3, 8, 9] -> "0-3, 8-9"; [4] -> "4". */
export function rankRanges(ranks: number[]): string {
  const xs = [...new Set(ranks)].sort((a, b) => a - b);
  const out: string[] = [];
  for (let i = 0; i < xs.length;) {
    let j = i;
    while (j + 1 < xs.length && xs[j + 1] === xs[j] + 1) j++;
    out.push(j > i ? `${xs[i]}-${xs[j]}` : String(xs[i]));
    i = j + 1;
  }
  return out.join(", ");
}

/** A text with every bracketed list of two or more ranks folded: "0 [0, 1, 2, 3]" -> "0 (4 ranks: 0-3)". */
export function foldRanks(text: string): string {
  return text.replace(/\[(\s*\d+\s*(?:,\s*\d+\s*)+)\]/g, (_, list: string) => {
    const xs = list.split(",").map((x) => Number(x.trim()));
    return `(${xs.length} ranks: ${rankRanges(xs)})`;
  });
}
