/* The upload box refuses a file over the limit in the browser (dcc.Upload's max_size: nothing is sent) and says so
   here with the same message as the server's check (#upload-limit holds the limit and the message). */
(function () {
    function refuse(files) {
        const limit = document.getElementById("upload-limit");
        if (!limit || !files) { return; }
        if (Array.from(files).some(function (f) { return f.size > Number(limit.dataset.limit); })) {
            window.dash_clientside.set_props("open-msg", {children: limit.dataset.message});
        }
    }
    document.addEventListener("change", function (e) {
        if (e.target.closest && e.target.closest("#upload")) { refuse(e.target.files); }
    }, true);
    document.addEventListener("drop", function (e) {
        if (e.target.closest && e.target.closest("#upload")) { refuse(e.dataTransfer && e.dataTransfer.files); }
    }, true);
})();
