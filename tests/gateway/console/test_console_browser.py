"""The console's Requests pages in a real browser (system Chromium under Playwright) against the gateway
under uvicorn, real Redis, the scripted upstream and traffic sent through the gateway: one escalated,
one accepted and one failed request (``served_console``). Each page is signed in through the login
form, and any console or page error fails the test (``console_page``). With
``CASCADE_CONSOLE_SCREENSHOTS=docs/images`` each page is also saved as a picture for the docs.
"""

from __future__ import annotations

import re
from typing import Any

from tests.support.console_browser import ErrorWatch, screenshot
from tests.support.gateway_testkit import ADMIN_KEY


def test_the_requests_page_lists_the_traffic_newest_first(console_page: Any, served_console: Any) -> None:
    page = console_page
    table = page.get_by_role("table", name="Requests")
    rows = table.get_by_role("row")
    ids = [served_console.failed, served_console.accepted, served_console.escalated]
    for request_id in ids:
        page.get_by_role("link", name=request_id).wait_for()
    listed = [row.get_by_role("link").first.inner_text() for row in rows.all()[1:4]]
    assert listed == ids  # newest first
    escalated = rows.filter(has=page.get_by_role("link", name=served_console.escalated))
    assert "small → large" in escalated.inner_text() and "low_score" in escalated.inner_text()
    failed = rows.filter(has=page.get_by_role("link", name=served_console.failed))
    assert "error" in failed.inner_text()
    assert page.locator("#requests-chart canvas").count() == 1  # uPlot drew the chart
    screenshot(page, "console-requests")


def test_a_filter_updates_the_table_in_place(console_page: Any, served_console: Any) -> None:
    page = console_page
    page.get_by_label("Outcome").select_option("escalated")  # htmx: a change swaps the table
    page.wait_for_url(re.compile(r"outcome=escalated"))
    table = page.get_by_role("table", name="Requests")
    page.get_by_role("link", name=served_console.accepted).wait_for(state="detached")
    assert table.get_by_role("link", name=served_console.escalated).is_visible()
    assert table.get_by_role("link", name=served_console.failed).count() == 0
    assert page.get_by_role("heading", name="Requests").count() == 1  # swapped, not nested


def test_the_request_page_shows_each_stage_and_the_charge(console_page: Any, served_console: Any) -> None:
    page = console_page
    page.get_by_role("link", name=served_console.escalated).click()
    page.wait_for_url(f"**/console/requests/{served_console.escalated}")
    assert page.get_by_role("heading", name=f"Request {served_console.escalated}").is_visible()
    stages = page.get_by_role("table", name="Stages").get_by_role("row")
    assert stages.count() == 3  # the header and two stages
    first, second = stages.nth(1).inner_text(), stages.nth(2).inner_text()
    assert "small" in first and "escalated" in first and "low_score" in first and "0.5000" in first
    assert "large" in second and "answered" in second
    assert "First token" in stages.nth(0).inner_text()
    # The seeded requests are not streamed: their stages were read whole, no first token.
    assert stages.nth(1).get_by_role("cell").nth(8).inner_text() == "-"
    story = page.get_by_role("list").filter(has_text="Stage 1").inner_text()
    assert "scored" in story and "against threshold 0.5000" in story
    headers = page.get_by_role("table", name="Headers sent").inner_text()
    assert "small,large" in headers and served_console.escalated in headers
    assert page.get_by_text("Billed by usage").is_visible()
    screenshot(page, "console-request")


def test_the_failed_request_says_why(console_page: Any, served_console: Any) -> None:
    page = console_page
    page.goto(f"/console/requests/{served_console.failed}")
    assert page.locator(".verdict").inner_text() == "Error (upstream_failed), status 502."
    stages = page.get_by_role("table", name="Stages").inner_text()
    assert "large" in stages and "2 (1 retried)" in stages


def test_the_console_asks_for_the_admin_key(browser: Any, served_console: Any) -> None:
    context = browser.new_context(base_url=served_console.url)
    page = context.new_page()
    watch = ErrorWatch(page)
    try:
        page.goto(f"/console/requests/{served_console.accepted}")
        page.wait_for_url(re.compile(r"/console/login\?next="))
        page.get_by_label("Admin key").fill("not-the-key")
        page.get_by_role("button", name="Sign in").click()
        assert page.get_by_role("alert").inner_text() == "That is not the admin key."
        screenshot(page, "console-login")
        page.get_by_label("Admin key").fill(ADMIN_KEY)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"**/console/requests/{served_console.accepted}")  # back where it was asked
        cookie = next(c for c in context.cookies() if c["name"] == "cascade_console")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and ADMIN_KEY not in cookie["value"]
        page.get_by_role("button", name="Sign out").click()
        page.wait_for_url("**/console/login")
    finally:
        context.close()
    # The wrong key's 401 is the only error the browser reports.
    assert [e for e in watch.errors if "401" not in e] == []


def test_the_tables_and_filters_work_without_javascript(browser: Any, served_console: Any) -> None:
    context = browser.new_context(
        base_url=served_console.url,
        java_script_enabled=False,
        extra_http_headers={"authorization": f"Bearer {ADMIN_KEY}"},
    )
    page = context.new_page()
    try:
        page.goto("/console/requests")
        page.get_by_label("Outcome").select_option("accepted")
        page.get_by_role("button", name="Filter").click()  # a plain GET form
        page.wait_for_url(re.compile(r"outcome=accepted"))
        table = page.get_by_role("table", name="Requests")
        assert table.get_by_role("link", name=served_console.accepted).is_visible()
        assert table.get_by_role("link", name=served_console.escalated).count() == 0
    finally:
        context.close()
