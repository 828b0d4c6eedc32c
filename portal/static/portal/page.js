// Small behaviours every page shares (a static file: the Content-Security-Policy allows no inline
// script).
document.addEventListener("DOMContentLoaded", () => {
  // After a refused submit, move focus to the first field in error (its aria-describedby reads
  // the error out), or to the form's error summary when no field is to blame.
  const target =
    document.querySelector("form [aria-invalid='true']") ||
    document.querySelector(".form-errors[tabindex='-1']");
  if (target) {
    target.focus();
    target.scrollIntoView({ block: "center" });
  }
  // An address field whose example follows the kind chosen (a notification channel's).
  for (const kind of document.querySelectorAll("select[data-placeholders]")) {
    const target = kind.form?.elements.namedItem("target");
    if (!target) continue;
    const examples = JSON.parse(kind.dataset.placeholders);
    kind.addEventListener("change", () => {
      target.placeholder = examples[kind.value] || "";
    });
  }
  // Copy a shown-once secret: the button shows only where the page may write the clipboard.
  for (const button of document.querySelectorAll("button[data-copy]")) {
    const source = document.getElementById(button.dataset.copy);
    const said = document.getElementById(`${button.dataset.copy}-copied`);
    if (!source || !navigator.clipboard || !window.isSecureContext) continue;
    button.hidden = false;
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(source.textContent.trim());
        if (said) said.textContent = "Copied.";
      } catch {
        if (said) said.textContent = "Not copied: select it and copy it yourself.";
      }
    });
  }
  // A table or diagram wider than a phone scrolls inside its box: let the keyboard reach it.
  for (const box of document.querySelectorAll(".scroll, figure.node")) {
    if (box.scrollWidth > box.clientWidth && !box.hasAttribute("tabindex")) {
      box.setAttribute("tabindex", "0");
      if (box.tagName === "FIGURE") continue; // named by its figcaption already
      const heading = box.closest("section")?.querySelector("h2, h3");
      box.setAttribute("role", "region");
      box.setAttribute("aria-label", `${heading ? heading.textContent.trim() : "The"} table, scrolls sideways`);
    }
  }
});
