"""The retrieval tab's user path in a browser page, shared by the app's own browser test and the
hub's: the products are there when the page opens; pick the first product, search with the default
request, and check the results and the attribute-group routing weights are on the page."""


def search_first_product(page) -> None:
    page.get_by_text("ready:").wait_for()
    page.locator(".thumbnail-item").first.click()
    page.get_by_role("button", name="Search").click()
    page.get_by_text("colour").first.wait_for()
    page.get_by_text("pattern").first.wait_for()
    assert page.locator("img").count() >= 10
