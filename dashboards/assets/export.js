/* A table's Export button: its rows as the table holds them after filtering and sorting (every page), under the
   headers shown, as CSV. A text cell a spreadsheet would read as a formula (it starts with = + - @, a tab or a
   carriage return) gets a leading ' (OWASP, CSV injection): a trace's names are the trace author's text. The rows
   and columns are those the table hands its own Export button; where they cannot be found the table exports. */
(function () {
    const FORMULA = /^[=+\-@\t\r]/;

    function tableProps(button) {
        const key = Object.keys(button).find(function (k) { return k.startsWith("__reactFiber$"); });
        let fiber = key && button[key];
        while (fiber && !(fiber.memoizedProps && fiber.memoizedProps.virtual_data)) { fiber = fiber.return; }
        return fiber && fiber.memoizedProps;
    }

    function cell(value) {
        let text = value === null || value === undefined ? "" : String(value);
        if (typeof value === "string" && FORMULA.test(text)) { text = "'" + text; }
        return /[",\r\n]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
    }

    function csv(props) {
        const columns = props.export_columns === "visible" ? props.visibleColumns : props.columns;
        const name = function (c) { return Array.isArray(c.name) ? c.name[c.name.length - 1] : c.name; };
        const lines = [columns.map(function (c) { return cell(props.export_headers === "ids" ? c.id : name(c)); })];
        props.virtual_data.data.forEach(function (row) {
            lines.push(columns.map(function (c) { return cell(row[c.id]); }));
        });
        return lines.map(function (cells) { return cells.join(","); }).join("\r\n") + "\r\n";
    }

    document.addEventListener("click", function (e) {
        const button = e.target.closest && e.target.closest(".dash-table-container button.export");
        const props = button && tableProps(button);
        if (!props) { return; }
        e.stopImmediatePropagation();
        e.preventDefault();
        const table = button.closest(".dash-table-container");
        const link = document.createElement("a");
        link.href = URL.createObjectURL(new Blob(["\ufeff" + csv(props)], {type: "text/csv;charset=utf-8"}));
        link.download = ((table && table.id) || "table") + ".csv";
        document.body.appendChild(link);
        link.click();
        link.remove();
        setTimeout(function () { URL.revokeObjectURL(link.href); }, 10000);
    }, true);
})();
