// The one plotly config every chart is drawn with (tests/platform/test_web_hardening.py checks that
// each Plotly call passes it): no plotly logo, and no toolbar button that sends a chart's data off
// the platform ("Share chart" / cloud upload, "Edit in Chart Studio").
export const PLOTLY_CONFIG = {
  displaylogo: false,
  showSendToCloud: false,
  showEditInChartStudio: false,
  modeBarButtonsToRemove: ["sendDataToCloud", "editInChartStudio"],
  responsive: true,
};
