// Tabs as the WAI-ARIA Authoring Practices describe them: role=tablist/tab/tabpanel, one tab in the Tab
// order (roving tabindex), Left/Right (wrapping), Home and End move between tabs and select them. The
// selected tab is kept in the URL's hash (#seq2seq), so a link opens that tab.

export function setupTabs(tablist: HTMLElement, onSelect?: (id: string) => void): void {
  const tabs = [...tablist.querySelectorAll<HTMLButtonElement>('[role="tab"]')];
  const panelOf = (t: HTMLElement) => document.getElementById(t.getAttribute("aria-controls") ?? "");
  const select = (tab: HTMLButtonElement, focus: boolean) => {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
      const p = panelOf(t);
      if (p) p.hidden = !on;
    }
    if (focus) tab.focus();
    const id = tab.id.replace(/^tab-/, "");
    history.replaceState(null, "", `#${id}`);
    onSelect?.(id);
  };
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => select(tab, false));
    tab.addEventListener("keydown", (e) => {
      const to =
        e.key === "ArrowRight" ? (i + 1) % tabs.length
        : e.key === "ArrowLeft" ? (i - 1 + tabs.length) % tabs.length
        : e.key === "Home" ? 0
        : e.key === "End" ? tabs.length - 1
        : -1;
      if (to < 0) return;
      e.preventDefault();
      select(tabs[to]!, true);
    });
  });
  const fromHash = tabs.find((t) => t.id === `tab-${location.hash.slice(1)}`);
  if (fromHash) select(fromHash, false);
}
